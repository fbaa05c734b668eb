"""bench/train_step.py: one training step (forward + backward) of a
Llama-3.2-1B-shaped causal LM with random weights (nothing downloaded:
vocabulary 128256, hidden 2048, 16 layers, tied embeddings; batch 2 x 2048
tokens, bf16, sdpa), with each loss in turn, in one run: transformers' own,
tuned's cross-entropy (tuned.integrations.transformers.apply, gradient in
place), tuned's linear cross-entropy (apply(linear=True); then at Liger's
chunk memory, by default the whole 4096 rows in 32 vocabulary blocks, 2048
rows in 16 and 512 rows in 4, --blocks R/S,... to choose: apply(linear=True,
chunk_rows=R, vocab_splits=S); --budgets MiB,... each the store's winner
within that budget of chunk logits: apply(linear=True,
max_chunk_bytes=MiB << 20)), Cut
Cross-Entropy through the same hook (its linear_cross_entropy in place of
tuned's), then Liger's cross-entropy and Liger's fused linear
cross-entropy (Liger patches transformers' classes; they are restored
after each). Prints each step's median time over --steps after warm-up,
and its peak memory; a short table last, with --rounds N each round's
time (the losses run N times in turn, so that drift between them
shows). --peak NAME,... records the allocator's history over those
losses' timed steps and prints the allocations live at their peak (where
a peak's memory goes).

    python3 bench/train_step.py [--layers 16] [--seq 2048] [--batch 2] [--steps 10]
                                [--only NAME,NAME...] [--blocks R/S,...] [--peak NAME,...]
                                [--rounds N] [--budgets MiB,...]

Needs a CUDA GPU, torch, transformers, and for its column liger_kernel;
tuned's package on PYTHONPATH with libtuned (TUNED_LIBRARY) and a store
(TUNED_DB) holding cross_entropy's record for the shape (batch * seq x
vocabulary, bf16), else the first steps run the default config."""

import argparse
import gc
import statistics
import sys

import torch
import transformers


def build(layers):
    cfg = transformers.LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                                   num_hidden_layers=layers, num_attention_heads=32,
                                   num_key_value_heads=8, max_position_embeddings=4096,
                                   tie_word_embeddings=True, attn_implementation="sdpa")
    torch.manual_seed(0)
    # initialised on the GPU (on the host, 1.2B parameters took most of a
    # call's time per loss)
    with torch.device("cuda"):
        return transformers.LlamaForCausalLM(cfg).to(dtype=torch.bfloat16)


def peak_of(trace):
    """(the most bytes live at once, {addr: alloc event} live then) over an
    allocator trace's alloc and free events."""
    live, total, best, at_peak = {}, 0, -1, {}
    for ev in trace:
        if ev["action"] == "alloc":
            live[ev["addr"]] = ev
            total += ev["size"]
            if total > best:
                best, at_peak = total, dict(live)
        elif ev["action"] in ("free_requested", "free_completed") and ev["addr"] in live:
            total -= live.pop(ev["addr"])["size"]
    return best, at_peak


def peak_live(trace, top=25):
    """Prints the allocations live at the peak of an allocator trace (the
    steps' own: what was allocated before the history began, the weights,
    is not in it), largest first, each with its innermost frame in tuned's,
    transformers' or Liger's code."""
    best, at_peak = peak_of(trace)

    def where(ev):
        frames = ev.get("frames") or []
        mine = [f for f in frames if any(k in f["filename"] for k in
                                         ("tuned/", "transformers/", "liger_kernel/"))]
        f = (mine or frames or [{"filename": "?", "line": 0, "name": "?"}])[0]
        return f"{f['filename'].rsplit('/', 2)[-2:]}:{f['line']} {f['name']}"

    print(f"  peak of the steps' own allocations: {best / 2**20:.1f} MiB, "
          f"{len(at_peak)} live; by the frame that made them, largest first:")
    sites = {}
    for ev in at_peak.values():
        n, size = sites.get(where(ev), (0, 0))
        sites[where(ev)] = (n + 1, size + ev["size"])
    for site, (n, size) in sorted(sites.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"    {size / 2**20:9.2f} MiB in {n:3}  {site}")


# what apply_liger_kernel_to_llama(cross_entropy=..., fused_linear_cross_entropy=...)
# replaces outside the model it is given
LIGER_PATCHES = [(transformers.models.llama.modeling_llama.LlamaForCausalLM, "forward"),
                 (torch.nn.functional, "cross_entropy")]


def run(name, patch, args):
    if args.only and not any(name == o.strip() for o in args.only.split(",")):
        return None
    m = build(args.layers)
    patch(m)
    ids = torch.randint(0, 128256, (args.batch, args.seq), device="cuda")
    traced = name in (p.strip() for p in args.peak.split(","))
    times = []
    for i in range(args.steps + 3):
        m.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i == 3:
            torch.cuda.reset_peak_memory_stats()
            if traced:
                # the timed steps' history, so that the peak found is the
                # one max_memory_allocated reports (the timing then
                # includes the recording's cost)
                torch.cuda.memory._record_memory_history(max_entries=2000000)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = m(input_ids=ids, labels=ids)
        out.loss.backward()
        b.record()
        b.synchronize()
        if i >= 3:
            times.append(a.elapsed_time(b))
    peak = torch.cuda.max_memory_allocated() / 2**30
    if traced:
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        print(f"{name}: allocations live at the peak ({peak:.2f} GiB in all; "
              f"the step's time includes the history's recording)", flush=True)
        peak_live(snap["device_traces"][torch.cuda.current_device()])
        del snap
    loss = out.loss.item()
    del m, out
    # a model a loss's patch left in a reference cycle is freed here, not
    # counted in the next loss's peak
    gc.collect()
    torch.cuda.empty_cache()
    # each loss's line as it ends: a call cut short keeps the ones done
    print(f"{name}: {statistics.median(times):.1f} ms, {peak:.2f} GiB, loss {loss:.4f}",
          flush=True)
    return name, statistics.median(times), peak, loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--only", default="",
                    help="comma-separated names of the losses to run (default: all)")
    ap.add_argument("--blocks", default="4096/32,2048/16,512/4",
                    help="tuned linear's vocabulary-block settings, ROWS/SPLITS,...")
    ap.add_argument("--peak", default="",
                    help="losses' names, NAME,...: print the allocations live at the peak of "
                         "their timed steps")
    ap.add_argument("--budgets", default="",
                    help="tuned linear within each budget (MiB of chunk logits) at the store's "
                         "winner for it")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the losses this many times in turn (A B C A B C): the table "
                         "gives each round's step time, so that drift shows")
    args = ap.parse_args()
    import tuned.integrations.transformers as tt
    losses = [("transformers", lambda m: None),
              ("tuned cross-entropy", tt.apply),
              ("tuned linear", lambda m: tt.apply(m, linear=True))]
    # at Liger's memory: a chunk's logits made a block of the vocabulary at
    # a time, each block as large as Liger's chunk (its rows x V: 128 rows
    # here), so that d weight's GEMM sums over the chunk's many rows (all
    # of them at 4096/32: each block's d weight written once)
    for rows_, splits in (tuple(int(v) for v in b.split("/")) for b in args.blocks.split(",")
                          if b):
        losses.append((f"tuned linear {rows_}/{splits}",
                       lambda m, r=rows_, s=splits: tt.apply(m, linear=True, chunk_rows=r,
                                                             vocab_splits=s)))
    for mib in (int(b) for b in args.budgets.split(",") if b):
        losses.append((f"tuned linear {mib} MiB",
                       lambda m, mib=mib: tt.apply(m, linear=True, max_chunk_bytes=mib << 20)))
    try:
        from cut_cross_entropy import linear_cross_entropy as cce

        def cce_loss(hidden, weight, target, bias=None, ignore_index=-100, reduction="mean",
                     num_items=None, **_):
            loss = cce(hidden, weight, target, ignore_index=ignore_index,
                       reduction="sum" if num_items is not None else reduction)
            return loss / num_items if num_items is not None else loss

        # tuned's linear path with Cut Cross-Entropy's function in its
        # place (the integration looks the function up at each loss)
        losses.append(("cut cross-entropy", lambda m: tt.apply(m, linear=True), cce_loss))
    except ImportError as exc:
        print(f"cut_cross_entropy: not available ({exc})")
    try:
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        def liger(m):
            apply_liger_kernel_to_llama(rope=False, rms_norm=False, swiglu=False,
                                        cross_entropy=True, fused_linear_cross_entropy=False,
                                        model=m)

        def liger_flce(m):
            apply_liger_kernel_to_llama(rope=False, rms_norm=False, swiglu=False,
                                        cross_entropy=False, fused_linear_cross_entropy=True,
                                        model=m)
        losses += [("liger cross-entropy", liger), ("liger fused linear", liger_flce)]
    except ImportError as exc:
        print(f"liger: not available ({exc})")
    results = {}
    for _ in range(args.rounds):
        for name, patch, *swap in losses:
            own = tt.linear_cross_entropy
            if swap:
                tt.linear_cross_entropy = swap[0]
            # Liger patches transformers' classes and torch's cross_entropy
            # where transformers calls it: put them back for the next round
            saved = [(o, a, getattr(o, a)) for o, a in LIGER_PATCHES]
            try:
                got = run(name, patch, args)
            finally:
                tt.linear_cross_entropy = own
                for o, a, v in saved:
                    setattr(o, a, v)
            if got is not None:
                results.setdefault(name, []).append(got[1:])
    rounds = " ".join(f"{'round ' + str(i + 1):>8}" for i in range(args.rounds))
    print(f"\n{'loss':22} {'step ms':>8} {rounds} {'peak GiB':>9} {'loss value':>11}")
    for name, got in results.items():
        ms = statistics.median(g[0] for g in got)
        each = " ".join(f"{g[0]:8.1f}" for g in got)
        print(f"{name:22} {ms:8.1f} {each} {max(g[1] for g in got):9.3f} {got[-1][2]:11.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
