"""bench/train_step.py: one training step (forward + backward) of a
Llama-3.2-1B-shaped causal LM with random weights (nothing downloaded:
vocabulary 128256, hidden 2048, 16 layers, tied embeddings; batch 2 x 2048
tokens, bf16, sdpa), with each loss in turn, in one run: transformers' own,
tuned's cross-entropy (tuned.integrations.transformers.apply, gradient in
place), tuned's linear cross-entropy (apply(linear=True); then at Liger's
chunk memory, the whole 4096 rows in 32 vocabulary blocks, 2048 rows in
16 and 512 rows in 4: apply(linear=True, chunk_rows=R, vocab_splits=S)), Cut
Cross-Entropy through the same hook (its linear_cross_entropy in place of
tuned's), then Liger's cross-entropy and Liger's fused linear
cross-entropy (last: Liger patches transformers' classes). Prints each
step's median time over --steps after warm-up, and its peak memory; a
short table last.

    python3 bench/train_step.py [--layers 16] [--seq 2048] [--batch 2] [--steps 10]
                                [--only NAME,NAME...]

Needs a CUDA GPU, torch, transformers, and for its column liger_kernel;
tuned's package on PYTHONPATH with libtuned (TUNED_LIBRARY) and a store
(TUNED_DB) holding cross_entropy's record for the shape (batch * seq x
vocabulary, bf16), else the first steps run the default config."""

import argparse
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


def run(name, patch, args):
    if args.only and not any(name == o.strip() for o in args.only.split(",")):
        return None
    m = build(args.layers)
    patch(m)
    ids = torch.randint(0, 128256, (args.batch, args.seq), device="cuda")
    times = []
    for i in range(args.steps + 3):
        m.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i == 3:
            torch.cuda.reset_peak_memory_stats()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = m(input_ids=ids, labels=ids)
        out.loss.backward()
        b.record()
        b.synchronize()
        if i >= 3:
            times.append(a.elapsed_time(b))
    peak = torch.cuda.max_memory_allocated() / 2**30
    loss = out.loss.item()
    del m, out
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
    args = ap.parse_args()
    import tuned.integrations.transformers as tt
    rows = [run("transformers", lambda m: None, args)]
    rows.append(run("tuned cross-entropy", tt.apply, args))
    rows.append(run("tuned linear", lambda m: tt.apply(m, linear=True), args))
    # at Liger's memory: a chunk's logits made a block of the vocabulary at
    # a time, each block as large as Liger's chunk (its rows x V: 128 rows
    # here), so that d weight's GEMM sums over the chunk's many rows (all
    # of them at 4096/32: each block's d weight written once)
    for rows_, splits in ((4096, 32), (2048, 16), (512, 4)):
        rows.append(run(f"tuned linear {rows_}/{splits}",
                        lambda m, r=rows_, s=splits: tt.apply(m, linear=True, chunk_rows=r,
                                                              vocab_splits=s), args))
    try:
        from cut_cross_entropy import linear_cross_entropy as cce

        def cce_loss(hidden, weight, target, bias=None, ignore_index=-100, reduction="mean",
                     num_items=None, **_):
            loss = cce(hidden, weight, target, ignore_index=ignore_index,
                       reduction="sum" if num_items is not None else reduction)
            return loss / num_items if num_items is not None else loss
        own = tt.linear_cross_entropy
        tt.linear_cross_entropy = cce_loss
        try:
            rows.append(run("cut cross-entropy", lambda m: tt.apply(m, linear=True), args))
        finally:
            tt.linear_cross_entropy = own
    except ImportError as exc:
        print(f"cut_cross_entropy: not available ({exc})")
    try:
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        def liger(m):
            apply_liger_kernel_to_llama(rope=False, rms_norm=False, swiglu=False,
                                        cross_entropy=True, fused_linear_cross_entropy=False,
                                        model=m)
        rows.append(run("liger cross-entropy", liger, args))

        def liger_flce(m):
            apply_liger_kernel_to_llama(rope=False, rms_norm=False, swiglu=False,
                                        cross_entropy=False, fused_linear_cross_entropy=True,
                                        model=m)
        rows.append(run("liger fused linear", liger_flce, args))
    except ImportError as exc:
        print(f"liger: not available ({exc})")
    print(f"\n{'loss':22} {'step ms':>8} {'peak GiB':>9} {'loss value':>11}")
    for name, ms, peak, loss in (r for r in rows if r is not None):
        print(f"{name:22} {ms:8.1f} {peak:9.2f} {loss:11.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
