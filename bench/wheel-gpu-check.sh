#!/usr/bin/env bash
# bench/wheel-gpu-check.sh WHEEL: the wheel as a PyTorch user gets it, on a
# GPU machine. A fresh venv holding only the wheel (and the machine's
# torch, named by a .pth file) runs, from /tmp with a fresh HOME, no
# TUNED_* variables and no daemon:
#   1. the CUDA toolkit hidden (its directories renamed for the run, put
#      back on exit; HIDE_TOOLKIT=0 leaves it): `tuned devices` and the
#      processes below find NVRTC in torch's nvidia-* wheels;
#   2. two user processes (bench/wheel_gpu_user.py), the second started
#      half a second after the first, on one new shape: each first runs the
#      default config, then the first one's child `tuned` tunes it into the
#      user's store and both switch to the exact winner; the second waits
#      for the first's tune (the store's tune lock) rather than tuning again.
#      Every `tuned tune` process seen (polled every 0.1 s) is listed with
#      its lifetime.
# Output: OUT (the device tool's folder), else /tmp/wheel-gpu-check; a
# short summary last.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
whl="$(cd "$(dirname "${1:?usage: bench/wheel-gpu-check.sh WHEEL}")" && pwd)/$(basename "$1")"
out="${OUT:-/tmp/wheel-gpu-check}"
mkdir -p "$out"
venv=/tmp/tuned-wheel-venv
home=/tmp/tuned-wheel-home
rm -rf "$venv" "$home"
mkdir -p "$home"
# The machine's torch lives in a venv of its own (python3 is that venv's):
# a venv made from it does not see its packages, so a .pth names them.
python3 -m venv "$venv" || exit 1
torch_site="$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
py_site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$torch_site" >"$py_site/machine-torch.pth"
"$venv/bin/python" -m pip install -q --no-index --no-deps "$whl" >"$out/pip.log" 2>&1 ||
    { cat "$out/pip.log"; exit 1; }

hidden=()
restore() {
    local d
    for d in "${hidden[@]}"; do mv "$d.hidden-by-tuned" "$d"; done
}
trap restore EXIT
if [[ "${HIDE_TOOLKIT:-1}" == 1 ]]; then
    for d in /usr/local/cuda "$(readlink -f /usr/local/cuda 2>/dev/null)"; do
        if [[ -n "$d" && -e "$d" && ! -e "$d.hidden-by-tuned" ]]; then
            mv "$d" "$d.hidden-by-tuned" && hidden+=("$d")
        fi
    done
fi
echo "toolkit hidden: ${hidden[*]:-none}" | tee "$out/summary.txt"

# The user's environment: the venv's bin first, nothing of ours.
clean=(env -i HOME="$home" PATH="$venv/bin:/usr/bin:/bin" LANG=C.UTF-8
       NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1)
cd /tmp || exit 1
"${clean[@]}" tuned --version >>"$out/summary.txt" 2>&1
"${clean[@]}" tuned devices >"$out/devices.txt" 2>&1
echo "tuned devices: exit $?" >>"$out/summary.txt"

shape=(3000 7001)
: >"$out/children.txt"
"${clean[@]}" python3 "$root/bench/wheel_gpu_user.py" first "${shape[@]}" \
    >"$out/first.json" 2>"$out/first.err" &
first=$!
sleep 0.5
"${clean[@]}" python3 "$root/bench/wheel_gpu_user.py" second "${shape[@]}" \
    >"$out/second.json" 2>"$out/second.err" &
second=$!
t0=$(date +%s.%N)
declare -A seen_first=() seen_last=()
set +u # an empty associative array is "unbound" to bash's -u
while kill -0 "$first" 2>/dev/null || kill -0 "$second" 2>/dev/null; do
    now=$(date +%s.%N)
    while read -r pid; do
        [[ -z "$pid" ]] && continue
        [[ -z "${seen_first[$pid]:-}" ]] && seen_first[$pid]=$now
        seen_last[$pid]=$now
    done < <(pgrep -f "bin/tuned tune" || true)
    sleep 0.1
done
wait "$first"; wait "$second"
for pid in "${!seen_first[@]}"; do
    awk -v p="$pid" -v a="${seen_first[$pid]}" -v b="${seen_last[$pid]}" -v t="$t0" \
        'BEGIN { printf "tuned tune pid %s: seen from %.1f s to %.1f s\n", p, a - t, b - t }' \
        >>"$out/children.txt"
done
"${clean[@]}" tuned list >"$out/list.txt" 2>&1
{
    echo "child tune processes seen: ${#seen_first[@]}"
    cat "$out/children.txt"
    echo "stderr of the first process:"; sed 's/^/  /' "$out/first.err" | tail -n 5
    echo "stderr of the second process:"; sed 's/^/  /' "$out/second.err" | tail -n 5
    echo "store:"; sed 's/^/  /' "$out/list.txt"
    python3 - "$out/first.json" "$out/second.json" <<'PY'
import json, sys
for path in sys.argv[1:]:
    try:
        r = json.loads(open(path).read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError) as exc:
        print(f"{path}: no result ({exc})")
        continue
    print(f"{r['who']}: {r['calls']} calls, {r['wrong_outputs']} wrong outputs, nvrtc {r['nvrtc']}")
    for e in r["events"]:
        print(f"  {e['t_s']:7.2f} s  {e['source']:8} tune={e['tune']:7} {e['config']} "
              f"{e['median_us']} us  {e['message']}")
PY
} >>"$out/summary.txt"
cat "$out/summary.txt"
