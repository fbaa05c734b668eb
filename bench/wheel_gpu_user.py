"""bench/wheel_gpu_user.py NAME ROWS COLS: a user's process for
bench/wheel-gpu-check.sh. It runs tuned.softmax on a fp16 shape no store
holds, every 0.2 s, each output checked against torch's, until
last_choice() says the winner is served exact (or 120 s), and prints one
JSON line: each change of (source, tune state) with its time from the
start, whether every output was right, which libnvrtc the process loaded
and where the tuned package lives."""

import json
import sys
import time

t0 = time.time()
import torch  # noqa: E402

import tuned  # noqa: E402

name, rows, cols = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
x = torch.randn(rows, cols, device="cuda", dtype=torch.float16)
ref = torch.softmax(x.float(), -1)
events, last, wrong, calls = [], None, 0, 0
while time.time() < t0 + 120:
    y = tuned.softmax(x)
    torch.cuda.synchronize()
    calls += 1
    wrong += not torch.allclose(y.float(), ref, atol=1e-3, rtol=1e-2)
    c = tuned.last_choice()
    if (c.source, c.tune) != last:
        last = (c.source, c.tune)
        events.append({"t_s": round(time.time() - t0, 2), "source": c.source, "tune": c.tune,
                       "config": c.config, "median_us": round(c.median_us, 2),
                       "message": c.tune_message[:160]})
    if c.source == "exact":
        break
    time.sleep(0.2)
nvrtc = sorted({ln.split()[-1] for ln in open("/proc/self/maps") if "nvrtc" in ln})
print(json.dumps({"who": name, "calls": calls, "wrong_outputs": wrong, "events": events,
                  "nvrtc": nvrtc, "package": tuned.__file__}))
