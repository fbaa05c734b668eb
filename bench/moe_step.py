"""bench/moe_step.py: what a user of a transformers mixture-of-experts model
sees of the router: a decode-sized forward and a training step, each with
transformers' own routers and with tuned's (tuned.integrations.
transformers.apply_routers), in turn, in one run. Random weights, nothing
downloaded, bf16:

  qwen3     Qwen3-30B-A3B's shape: 48 layers, hidden 2048, 128 experts,
            top-8 renormalised softmax (the router's logits bf16),
            moe_intermediate 768, vocabulary 151936 (about 30B parameters)
  deepseek  DeepSeek-V3's router (256 experts, sigmoid + score-correction
            bias, 8 groups keep 4, top-8, scaling 2.5; its logits fp32) in
            a smaller model: 16 layers, hidden 2048, moe_intermediate 512,
            one shared expert, vocabulary 32000

Phases, per model:
  decode    model(ids) over --decode-batch sequences of one token each, no
            cache, no gradient (a decode step's routing: one row per
            sequence and layer), every layer of the model
  train     forward + backward of the loss over --train-batch x --seq
            tokens, on the first --train-layers layers (the rest dropped
            after the decode phase)
Each step is timed on the host (perf_counter, the GPU synchronized after
it): the time a user waits for it, the L2 not flushed. The two routers run
--rounds times in turn (torch tuned, tuned torch, ...), --steps steps each
after two warm ones; a table last: each router's median step, the
difference a step and a layer, and how far the outputs differ (the
decode's last logits, and in one more decode step every router call run
both ways: the rows whose experts differ, with the float64 gap of what
they swapped, and the weights' largest difference where none did; the
logits again with transformers' routers, and with tuned's ids carrying
transformers' weights, which says whether a difference is the weights';
the training step's loss), then each round's medians, where drift shows.

    python3 bench/moe_step.py [--models qwen3,deepseek] [--decode-batch 1,64]
                              [--train-batch 4] [--seq 1024] [--train-layers 8]
                              [--steps 10] [--rounds 4] [--phases decode,train] [--tiny]

--tiny: a few small layers on the CPU (where tuned.router_topk is torch's
formula), to check the script, not to time. Needs torch and transformers;
tuned on PYTHONPATH with libtuned (TUNED_LIBRARY) and a store (TUNED_DB)
holding the routers' winners for the rows the phases route (decode batch,
train batch x seq), forward and backward, else each call falls back to the
nearest winner or the default config."""

import argparse
import statistics
import sys
import time

import torch
import transformers

import tuned.integrations.transformers as tt
import tuned.router as tuned_router_module


def qwen3_config(layers, tiny):
    if tiny:
        return transformers.Qwen3MoeConfig(
            vocab_size=300, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
            num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            num_experts=16, num_experts_per_tok=4, norm_topk_prob=True, decoder_sparse_step=1,
            max_position_embeddings=256)
    return transformers.Qwen3MoeConfig(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
        max_position_embeddings=4096)


def deepseek_config(layers, tiny):
    if tiny:
        return transformers.DeepseekV3Config(
            vocab_size=300, hidden_size=64, intermediate_size=128, moe_intermediate_size=16,
            num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
            n_routed_experts=32, num_experts_per_tok=4, n_group=4, topk_group=2,
            first_k_dense_replace=0, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8,
            v_head_dim=8, qk_nope_head_dim=8, routed_scaling_factor=2.5, norm_topk_prob=True,
            n_shared_experts=1, max_position_embeddings=256)
    return transformers.DeepseekV3Config(
        vocab_size=32000, hidden_size=2048, intermediate_size=8192, moe_intermediate_size=512,
        num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=16,
        n_routed_experts=256, num_experts_per_tok=8, n_group=8, topk_group=4,
        first_k_dense_replace=0, kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64,
        v_head_dim=128, qk_nope_head_dim=128, routed_scaling_factor=2.5, norm_topk_prob=True,
        n_shared_experts=1, max_position_embeddings=4096)


MODELS = {
    "qwen3": (qwen3_config, transformers.Qwen3MoeForCausalLM, 48),
    "deepseek": (deepseek_config, transformers.DeepseekV3ForCausalLM, 16),
}


def build(name, device, tiny):
    config_of, cls, layers = MODELS[name]
    cfg = config_of(2 if tiny else layers, tiny)
    torch.manual_seed(0)
    # made in bf16 on the device: 30B parameters in fp32 would not fit
    # beside their bf16 copy
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = cls(cfg)
    finally:
        torch.set_default_dtype(old)
    with torch.no_grad():
        for module in model.modules():
            # a score-correction bias that moves choices (it starts at 0)
            if hasattr(module, "e_score_correction_bias"):
                module.e_score_correction_bias.uniform_(0.0, 0.1)
    return model


def routers(model):
    return [m for m in model.modules() if type(m).__name__ in tt._ROUTERS]


def use_tuned(model, on):
    """The model's routers through tuned (on) or transformers' own forward
    (the instance attribute apply_routers sets removed)."""
    if on:
        tt.apply_routers(model)
    else:
        for module in routers(model):
            module.__dict__.pop("forward", None)


def swap_gap(module, logits, t, o):
    """The float64 gap (relative) between what two choices t and o (sets
    of expert ids) of one row swapped: the groups' scores where their kept
    groups differ, else the experts' order values (score + bias)."""
    x = logits.double()
    bias = getattr(module, "e_score_correction_bias", None)
    v = x.sigmoid() + bias.double() if bias is not None else x
    groups = getattr(module, "num_group", 1)
    size = v.numel() // groups
    gscore = v.view(groups, size).topk(min(2, size), -1).values.sum(-1)
    gt, go = {j // size for j in t}, {j // size for j in o}
    if gt != go:
        a, b = gscore[list(gt - go)].min(), gscore[list(go - gt)].max()
    else:
        a, b = v[list(t - o)].min(), v[list(o - t)].max()
    return (a - b).abs().item() / max(a.abs().item(), b.abs().item())


def audit(model, step, own_weights=False):
    """One step with tuned's routers, each router call also run through
    transformers' own forward on the same hidden states: how many rows
    chose another set of experts, and for those the largest swap_gap.
    A gap at fp32 rounding (about 1e-7) is a near-tie either may take. And
    the largest relative difference of the weights where the experts are
    the same. With own_weights the routers pass on tuned's ids (in tuned's
    order) with transformers' weights for them. Returns (that summary, the
    step's output)."""
    rows, differ, worst, wdiff = 0, 0, 0.0, 0.0

    def make(module):
        mine = tt._ROUTERS[type(module).__name__]

        def forward(hidden_states):
            nonlocal rows, differ, worst, wdiff
            got = mine(module, hidden_states)
            own = type(module).forward(module, hidden_states)
            ids_t, ids_o = got[2].long(), own[2].long()
            rows += ids_t.shape[0]
            (st, pt), (so, po) = ids_t.sort(-1), ids_o.sort(-1)
            changed = (st != so).any(-1)
            # the weights of rows that chose the same experts, by expert
            wt = got[1].double().gather(-1, pt)[~changed]
            wo = own[1].double().gather(-1, po)[~changed]
            if wt.numel():
                wdiff = max(wdiff, ((wt - wo).abs() / wo.abs().clamp_min(1e-30)).max().item())
            for r in changed.nonzero().flatten().tolist():
                differ += 1
                worst = max(worst, swap_gap(module, got[0][r], set(ids_t[r].tolist()),
                                            set(ids_o[r].tolist())))
            if not own_weights:
                return got
            # transformers' weights, each with its expert, in tuned's order
            # of the ids (rows that chose other experts keep tuned's)
            mixed = got[1].clone()
            placed = torch.empty_like(mixed).scatter_(-1, pt, own[1].gather(-1, po).to(mixed.dtype))
            mixed[~changed] = placed[~changed]
            return got[0], mixed, got[2]
        return forward

    for module in routers(model):
        module.forward = make(module)
    try:
        out = step()
    finally:
        use_tuned(model, False)
    return (f"ids differ in {differ} of {rows} rows"
            + (f" (largest gap {worst:.2g})" if differ else "")
            + f", weights within {wdiff:.2g} relative"), out


def timed_steps(step, steps, sync):
    for _ in range(2):
        step()
    sync()
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        sync()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def compare(model, step, args, sync):
    """{router: [step ms...]} over args.rounds rounds in turn, and
    {router: the step's last output}."""
    times, outputs = {"torch": [], "tuned": []}, {}
    for r in range(args.rounds):
        for name in ("torch", "tuned") if r % 2 == 0 else ("tuned", "torch"):
            use_tuned(model, name == "tuned")
            before = tuned_router_module.libtuned_calls
            times[name] += timed_steps(step, args.steps, sync)
            outputs[name] = step()
            if name == "tuned" and args.device == "cuda" and \
                    tuned_router_module.libtuned_calls == before:
                raise SystemExit("moe_step: tuned's routers did not run libtuned's kernels")
    use_tuned(model, False)
    return times, outputs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="qwen3,deepseek")
    ap.add_argument("--decode-batch", default="1,64")
    ap.add_argument("--train-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--train-layers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--phases", default="decode,train")
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    args.device = "cpu" if args.tiny else "cuda"
    if args.device == "cuda" and not torch.cuda.is_available():
        print("moe_step: no CUDA GPU (--tiny runs on the CPU)", file=sys.stderr)
        return 77
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}"
          + (f", {torch.cuda.get_device_name()}" if args.device == "cuda" else ", CPU"))
    rows = []
    for name in args.models.split(","):
        t0 = time.perf_counter()
        model = build(name, args.device, args.tiny)
        layers = model.config.num_hidden_layers
        print(f"{name}: {layers} layers, {len(routers(model))} routers, "
              f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters, experts "
              f"{getattr(model.config, '_experts_implementation', None)}, built in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        vocab = model.config.vocab_size
        gen = torch.Generator(device=args.device).manual_seed(1)
        model.eval()
        batches = args.decode_batch.split(",") if "decode" in args.phases else []
        for batch in (int(b) for b in batches if b):
            ids = torch.randint(0, vocab, (batch, 1), device=args.device, generator=gen)

            def decode(ids=ids):
                with torch.inference_mode():
                    return model(input_ids=ids, use_cache=False).logits.float()
            times, out = compare(model, decode, args, sync)
            summary, _ = audit(model, decode)
            # where the logits differ: transformers' routers run again, and
            # tuned's ids with transformers' weights
            _, mixed = audit(model, decode, own_weights=True)
            again = decode()

            def gap(a):
                return (a - out["torch"]).abs().max().item()
            rows.append((name, f"decode {batch}x1", layers, times,
                         f"logits max |diff| {gap(out['tuned']):.3g} (transformers' again "
                         f"{gap(again):.3g}, tuned's ids with transformers' weights "
                         f"{gap(mixed):.3g}), {summary}"))
            print(f"{name} decode {batch}: torch {statistics.median(times['torch']):.2f} ms, "
                  f"tuned {statistics.median(times['tuned']):.2f} ms", flush=True)
        if "train" not in args.phases:
            del model
            continue
        # training on the first layers only: every parameter's gradient
        # of 48 layers would not fit beside the weights and activations
        keep = min(args.train_layers, layers)
        model.model.layers = model.model.layers[:keep]
        model.config.num_hidden_layers = keep
        model.train()
        if args.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        ids = torch.randint(0, vocab, (args.train_batch, args.seq), device=args.device,
                            generator=gen)

        def train(ids=ids):
            model.zero_grad(set_to_none=True)
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
            return loss.detach().float()
        times, out = compare(model, train, args, sync)
        peak = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else 0.0
        rows.append((name, f"train {args.train_batch}x{args.seq}", keep, times,
                     f"loss {out['torch'].item():.5f} / {out['tuned'].item():.5f}, "
                     f"peak {peak:.1f} GiB"))
        print(f"{name} train: torch {statistics.median(times['torch']):.2f} ms, "
              f"tuned {statistics.median(times['tuned']):.2f} ms", flush=True)
        del model, ids
        if args.device == "cuda":
            torch.cuda.empty_cache()
    print(f"\n{'model':9} {'phase':14} {'layers':>6} {'torch ms':>9} {'tuned ms':>9} "
          f"{'diff ms':>8} {'us/layer':>8}  outputs")
    for name, phase, layers, times, note in rows:
        a, b = statistics.median(times["torch"]), statistics.median(times["tuned"])
        print(f"{name:9} {phase:14} {layers:6d} {a:9.2f} {b:9.2f} {b - a:8.2f} "
              f"{(b - a) * 1e3 / layers:8.1f}  {note}")
    print("\neach round's median step, ms (torch / tuned): drift between rounds shows here")
    for name, phase, layers, times, note in rows:
        each = [f"{statistics.median(times['torch'][i:i + args.steps]):.2f} / "
                f"{statistics.median(times['tuned'][i:i + args.steps]):.2f}"
                for i in range(0, len(times["torch"]), args.steps)]
        print(f"{name:9} {phase:14} " + "  ".join(each))
    return 0


if __name__ == "__main__":
    sys.exit(main())
