"""test_transformers_integration.py SOURCE_ROOT: tuned.integrations.transformers
on a tiny random Llama-shaped causal LM (nothing downloaded). On the CPU the
loss runs tuned.cross_entropy's torch path; on a CUDA GPU (when there is
one) tuned's kernels. Either way the loss and every parameter's gradient
must equal the model's own loss's: with labels, with ignored positions,
with gradient accumulation (num_items_in_batch), with the gradient
written over the logits (inplace_backward), and from the hidden states
(linear=True: tuned.linear_cross_entropy in chunks, the head given no
rows while training; in evaluation the model's logits as before; the
forward's signature kept; a Gemma 2's logit softcap taken from its
config). Tiny random Qwen3-MoE, Mixtral and DeepSeek-V3 models with their
routers through tuned.router_topk (apply_routers): the same loss and
gradients as with their own routers, and in bf16 each router's outputs
(logits, experts, weights and their dtype) as its own forward's.
Exits 77 without torch or transformers. Ends with 'N passed, N failed'."""

import os
import sys
import warnings

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

try:
    import torch
    import transformers
except ImportError as exc:
    print(f"SKIP: {exc}")
    sys.exit(77)

import tuned.integrations.transformers as tt  # noqa: E402
from verdicts import Verdicts  # noqa: E402

warnings.simplefilter("ignore")
verdicts = Verdicts()
expect = verdicts.expect


def model(device, dtype):
    cfg = transformers.LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=128,
                                   tie_word_embeddings=True)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).to(device=device, dtype=dtype)


def step(m, ids, labels, linear=False, **kw):
    m.zero_grad(set_to_none=True)
    out = m(input_ids=ids, labels=labels, **kw)
    if linear:
        # the head was given no rows: the logits were never made
        expect(out.logits.shape[-2] == 0, f"linear: logits of shape {tuple(out.logits.shape)}")
    out.loss.backward()
    return out.loss.detach().double(), {n: p.grad.detach().double().clone()
                                        for n, p in m.named_parameters() if p.grad is not None}


def compare(device, dtype, tol):
    ids = torch.randint(0, 1000, (3, 17), device=device)
    labels = ids.clone()
    labels[0, :5] = -100
    labels[2, -3:] = -100
    for kw in ({}, {"num_items_in_batch": torch.tensor(40, device=device)}):
        ref_model = model(device, dtype)
        ref_loss, ref_grads = step(ref_model, ids, labels, **kw)
        variants = [({"inplace_backward": True}, "inplace"), ({"inplace_backward": False}, "copy"),
                    ({"linear": True, "chunk_rows": 16}, "linear, chunks of 16 rows"),
                    ({"linear": True}, "linear, one chunk")]
        for options, name in variants:
            m = tt.apply(model(device, dtype), **options)
            loss, grads = step(m, ids, labels, linear=options.get("linear", False), **kw)
            what = f"{device} {dtype} {'accumulation ' if kw else ''}{name}"
            expect(abs(loss - ref_loss) <= tol * abs(ref_loss),
                   f"{what}: loss {loss.item()} against {ref_loss.item()}")
            worst = max(((grads[n] - g).abs().max() / g.abs().max().clamp_min(1e-30)).item()
                        for n, g in ref_grads.items())
            expect(worst <= tol * 10 and grads.keys() == ref_grads.keys(),
                   f"{what}: worst relative gradient difference {worst:.3g}")
    # linear=True in evaluation: the model's own logits and loss
    m = tt.apply(model(device, dtype), linear=True).eval()
    ref = model(device, dtype).eval()
    with torch.no_grad():
        out, want = m(input_ids=ids, labels=labels), ref(input_ids=ids, labels=labels)
    expect(out.logits.shape == want.logits.shape and
           bool(torch.allclose(out.logits, want.logits)) and
           abs(out.loss.double() - want.loss.double()) <= tol * abs(want.loss.double()),
           f"{device} {dtype} linear in evaluation: logits {tuple(out.logits.shape)}, loss "
           f"{out.loss.item()} against {want.loss.item()}")
    # the forward keeps its signature (Trainer reads it for the columns)
    import inspect
    m = tt.apply(model(device, dtype), linear=True)
    expect("input_ids" in inspect.signature(m.forward).parameters,
           f"linear: forward's signature {inspect.signature(m.forward)}")
    try:
        tt.apply(torch.nn.Linear(2, 2))
        expect(False, "apply to a module without loss_function is refused")
    except TypeError:
        expect(True, "")


def softcapped(device, dtype, tol):
    """A tiny Gemma 2 (final_logit_softcapping): linear=True takes the cap
    from the config, and gives the model's own loss and gradients."""
    if not hasattr(transformers, "Gemma2Config"):
        return
    cfg = transformers.Gemma2Config(vocab_size=500, hidden_size=64, intermediate_size=128,
                                    num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, head_dim=16,
                                    max_position_embeddings=128, final_logit_softcapping=0.5,
                                    attn_implementation="eager")
    ids = torch.randint(0, 500, (2, 11), device=device)

    def make():
        torch.manual_seed(0)
        return transformers.Gemma2ForCausalLM(cfg).to(device=device, dtype=dtype)
    ref_loss, ref_grads = step(make(), ids, ids)
    loss, grads = step(tt.apply(make(), linear=True, chunk_rows=8), ids, ids, linear=True)
    worst = max(((grads[n] - g).abs().max() / g.abs().max().clamp_min(1e-30)).item()
                for n, g in ref_grads.items())
    expect(abs(loss - ref_loss) <= tol * abs(ref_loss) and worst <= tol * 10,
           f"Gemma 2 softcap, linear: loss {loss.item()} against {ref_loss.item()}, worst "
           f"gradient difference {worst:.3g}")


def moe_model(name, device):
    torch.manual_seed(0)
    if name == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(
            vocab_size=300, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, num_experts=12,
            num_experts_per_tok=3, norm_topk_prob=True, decoder_sparse_step=1,
            max_position_embeddings=64, head_dim=8)
        m = transformers.Qwen3MoeForCausalLM(cfg)
    elif name == "mixtral":
        cfg = transformers.MixtralConfig(
            vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, num_local_experts=8,
            num_experts_per_tok=2, max_position_embeddings=64)
        m = transformers.MixtralForCausalLM(cfg)
    else:
        cfg = transformers.DeepseekV3Config(
            vocab_size=300, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
            n_routed_experts=16, num_experts_per_tok=4, n_group=4, topk_group=2,
            first_k_dense_replace=0, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8,
            v_head_dim=8, qk_nope_head_dim=8, routed_scaling_factor=2.5, norm_topk_prob=True,
            n_shared_experts=1, max_position_embeddings=64)
        m = transformers.DeepseekV3ForCausalLM(cfg)
    # random weights that route (zeros would tie every expert), and a
    # score-correction bias that moves choices
    for mod in m.modules():
        if hasattr(mod, "e_score_correction_bias"):
            mod.e_score_correction_bias.data = torch.rand_like(mod.e_score_correction_bias) * 0.1
        if type(mod).__name__ in tt._ROUTERS:
            torch.nn.init.normal_(mod.weight, std=0.5)
    return m.to(device)


def moe(device, tol):
    for name in ("qwen3_moe", "mixtral", "deepseek_v3"):
        try:
            m = moe_model(name, device)
        except (AttributeError, TypeError) as exc:  # an older transformers' names
            expect(True, "")
            print(f"moe: {name} not built here ({exc})")
            continue
        ids = torch.randint(0, 300, (2, 9), device=device)
        ref_loss, ref_grads = step(m, ids, ids)
        routed = tt.apply_routers(m)
        loss, grads = step(m, ids, ids)
        worst = max(((grads[n] - g).abs().max() / g.abs().max().clamp_min(1e-30)).item()
                    for n, g in ref_grads.items())
        expect(routed == 2 and abs(loss - ref_loss) <= tol * abs(ref_loss) and worst <= tol * 10,
               f"moe {name}: {routed} routers, loss {loss.item()} against {ref_loss.item()}, "
               f"worst gradient difference {worst:.3g}")


def moe_router_outputs(device, dtype):
    """Each router module of the MoE models in dtype, its own forward and
    tuned's on the same hidden states: the same logits and experts, the
    weights of the same dtype (Qwen3's cast to the logits' bf16 by
    transformers, written as bf16 by the kernel) within its rounding."""
    for name in ("qwen3_moe", "mixtral", "deepseek_v3"):
        try:
            m = moe_model(name, device).to(dtype)
        except (AttributeError, TypeError) as exc:  # an older transformers' names
            print(f"moe routers: {name} not built here ({exc})")
            continue
        for module in m.modules():
            mine = tt._ROUTERS.get(type(module).__name__)
            if mine is None:
                continue
            h = torch.randn(13, module.weight.shape[1], device=device, dtype=dtype)
            own, got = type(module).forward(module, h), mine(module, h)
            (so, po), (sg, pg) = own[2].sort(-1), got[2].sort(-1)
            wo, wg = own[1].gather(-1, po), got[1].gather(-1, pg)
            gap = ((wg.double() - wo.double()).abs() / wo.double().abs().clamp_min(1e-30)).max()
            tol = 1e-5 if wo.dtype == torch.float32 else 2 ** -7
            expect(torch.equal(own[0], got[0]) and torch.equal(so, sg) and wo.dtype == wg.dtype
                   and gap.item() <= tol,
                   f"moe router {name} {dtype}: logits equal {torch.equal(own[0], got[0])}, "
                   f"experts equal {torch.equal(so, sg)}, weights {wg.dtype} against "
                   f"{wo.dtype}, gap {gap.item():.3g}")
            break


def freed_without_collector(device, dtype):
    """A model applied with linear=True, stepped and dropped, frees its
    head's weight and gradient at once: no reference cycle through the
    hooks' state keeps them until the cyclic collector runs (a step's peak
    then counts a dropped model's head: a GiB at Llama-3.2-1B's size)."""
    import gc
    import weakref
    m = tt.apply(model(device, dtype), linear=True, chunk_rows=16)
    ids = torch.randint(0, 1000, (2, 9), device=device)
    step(m, ids, ids, linear=True)
    weight = weakref.ref(m.get_output_embeddings().weight)
    enabled = gc.isenabled()
    gc.disable()
    try:
        del m
        expect(weight() is None, "linear: a dropped model's head weight is still alive "
                                 "(held in a reference cycle)")
    finally:
        if enabled:
            gc.enable()


compare("cpu", torch.float32, 1e-5)
freed_without_collector("cpu", torch.float32)
softcapped("cpu", torch.float32, 1e-5)
moe("cpu", 1e-5)
moe_router_outputs("cpu", torch.bfloat16)
if torch.cuda.is_available():
    compare("cuda", torch.bfloat16, 2e-2)
    moe("cuda", 1e-4)
    moe_router_outputs("cuda", torch.bfloat16)
verdicts.finish()
