"""tuned.integrations.transformers: a transformers causal LM's loss through
tuned.cross_entropy, in one line.

    import tuned.integrations.transformers as tt
    tt.apply(model)                 # model(input_ids, labels=...) now uses it
    tt.apply(model, inplace_backward=False)
    tt.apply(model, linear=True)    # the loss from the hidden states: no logits

A mixture-of-experts model's routers (Mixtral's, Qwen2/3-MoE's,
DeepSeek-V3's) go through tuned.router_topk too (routers=False keeps
theirs): each router module's forward is replaced by one that returns the
same (router logits, weights, ids) by the same rules, in one kernel.

transformers computes a causal LM's loss (ForCausalLMLoss) by upcasting the
whole logits tensor to fp32 and calling F.cross_entropy, which keeps its
log-softmax for the backward: three logits-sized buffers beside the
logits. apply() sets model.loss_function to causal_lm_loss, which takes the
logits as they are (bf16 stays bf16; the kernels compute in fp32), shifts
the labels rather than the logits (as transformers does: the logits stay
one block of rows) and calls tuned.cross_entropy: one read of the logits,
one write of the gradient. With inplace_backward (the default here, as in
Liger's patch) the gradient is written over the logits: the logits the
model returns in its output are then the gradient after the loss's
forward; pass inplace_backward=False to keep them (one logits-sized
buffer more).

Gradient accumulation: transformers passes num_items_in_batch (the count of
label tokens over the accumulated batches); the loss is then the sum over
this batch divided by it, as transformers' own. Everything else (other
devices, dtypes, class weights) is tuned.cross_entropy's business, which
falls back to torch where its kernels do not apply.

linear=True (tuned.linear_cross_entropy): while the model trains
(model.training) and is given labels, the output head is given no rows
(a forward pre-hook on model.get_output_embeddings() keeps its input, the
final hidden states, and hands it an empty slice of them), and the loss
is computed from those hidden states and the head's weight (and bias)
in chunks, never holding the logits: the output's logits are then empty
(batch, 0, vocabulary). Evaluation, or a call without labels (by keyword,
as transformers' own callers pass them), runs the model as it was. What
a model does to its logits after the head is taken from its config:
Gemma 2 and 3's final_logit_softcapping (softcap), Cohere's logit_scale
and Granite's logits_scaling (scale); a model whose head is followed by
any other transform needs linear=False. Options for linear_cross_entropy
(chunk_rows, max_chunk_bytes, accumulate_fp32) pass through apply's
keywords."""

import functools
import types
import weakref

import torch

from ..cross_entropy import cross_entropy
from ..linear_cross_entropy import linear_cross_entropy
from ..router import router_topk

__all__ = ["apply", "causal_lm_loss"]


def causal_lm_loss(logits, labels, vocab_size, num_items_in_batch=None, ignore_index=-100,
                   shift_labels=None, *, inplace_backward=True, **kwargs):
    """transformers' ForCausalLMLoss through tuned.cross_entropy (its
    arguments; extra keyword arguments transformers passes are ignored)."""
    shift_labels = _shift(labels, ignore_index, shift_labels).reshape(-1).to(logits.device)
    rows = logits.reshape(-1, vocab_size)
    # In place needs reduction mean or sum, and the logits as an
    # intermediate (a leaf's storage is the caller's).
    inplace = (bool(inplace_backward) and torch.is_grad_enabled() and rows.requires_grad and
               not rows.is_leaf)
    # with num_items, the division carried by the kernel's gradient: the
    # backward moves nothing
    return cross_entropy(rows, shift_labels, ignore_index=ignore_index, inplace_backward=inplace,
                         **_reduction(num_items_in_batch, logits.device))


def _reduction(num_items_in_batch, device):
    """The loss's reduction as transformers asks for it: the mean, or with
    num_items_in_batch (gradient accumulation) the sum divided by it."""
    if num_items_in_batch is None:
        return {"reduction": "mean"}
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(device)
    return {"reduction": "sum", "num_items": num_items_in_batch}


def _shift(labels, ignore_index, shift_labels):
    """transformers' causal shift of the labels (the logits stay as they
    are): position t is scored against label t + 1, the last against none."""
    if shift_labels is None:
        labels = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)
        shift_labels = labels[..., 1:]
    return shift_labels


def _head_transform(config):
    """(softcap, scale) for what a model does to its logits after the head,
    from its config: Gemma 2 and 3's final_logit_softcapping, Cohere's
    logit_scale, Granite's logits_scaling (a divisor)."""
    softcap = getattr(config, "final_logit_softcapping", None) or None
    scale = 1.0
    if getattr(config, "logit_scale", None):
        scale *= float(config.logit_scale)
    if getattr(config, "logits_scaling", None):
        scale /= float(config.logits_scaling)
    return softcap, scale


class _LinearHead:
    """The state of apply(linear=True) on one model: whether this forward
    trains with labels (the model's pre-hook, which sees its keyword
    arguments), the hidden states the head's pre-hook kept, and the
    options."""

    def __init__(self, head, options):
        # a weak reference: the head's own hook holds this state, and a
        # strong one back would keep the head (an LM's largest weight and
        # its gradient) in a reference cycle that outlives the model until
        # the cyclic collector runs
        self.head = weakref.ref(head)
        self.options = options
        self.hidden = None
        self.active = False

    def model_pre_hook(self, module, args, kwargs):
        self.active = kwargs.get("labels") is not None and module.training
        self.hidden = None

    def model_post_hook(self, module, args, kwargs, output):
        self.active = False
        self.hidden = None

    def head_pre_hook(self, module, args):
        if not self.active or not args:
            return None
        self.hidden = h = args[0]
        # no rows, in a tensor of its own: a view of h would be saved by the
        # head's GEMM for a backward that never runs, keeping h's storage
        # alive with the model's output into the next step's forward
        return (h.new_empty(h.shape[:-2] + (0, h.shape[-1])),) + tuple(args[1:])

    def loss(self, logits, labels, vocab_size, num_items_in_batch=None, ignore_index=-100,
             shift_labels=None, **kwargs):
        hidden = self.hidden
        if hidden is None:
            # not this forward's hidden states (evaluation): the logits' loss
            return causal_lm_loss(logits, labels, vocab_size, num_items_in_batch, ignore_index,
                                  shift_labels)
        head = self.head()
        target = _shift(labels, ignore_index, shift_labels).to(hidden.device)
        return linear_cross_entropy(hidden, head.weight, target,
                                    bias=getattr(head, "bias", None),
                                    ignore_index=ignore_index,
                                    **_reduction(num_items_in_batch, hidden.device),
                                    **self.options)


# ---- MoE routers ----

def _mixtral_router(self, hidden_states):
    h = hidden_states.reshape(-1, self.hidden_dim)
    logits = torch.nn.functional.linear(h, self.weight)
    w, ids = router_topk(logits, self.top_k, renorm=True)
    return logits, w, ids


def _qwen_router(self, hidden_states):
    h = hidden_states.reshape(-1, self.hidden_dim)
    logits = torch.nn.functional.linear(h, self.weight)
    # transformers casts the fp32 weights to the logits' dtype; bf16 ones
    # come from the kernel rounded the same way (to nearest even), with no
    # cast's launch
    if logits.dtype == torch.bfloat16:
        w, ids = router_topk(logits, self.top_k, renorm=bool(self.norm_topk_prob),
                             weights_dtype=torch.bfloat16)
        return logits, w, ids
    w, ids = router_topk(logits, self.top_k, renorm=bool(self.norm_topk_prob))
    return logits, w.to(logits.dtype), ids


def _deepseek_v3_router(self, hidden_states):
    h = hidden_states.view(-1, self.hidden_dim)
    logits = torch.nn.functional.linear(h.type(torch.float32), self.weight.type(torch.float32))
    w, ids = router_topk(logits, self.top_k, score="sigmoid",
                         bias=self.e_score_correction_bias.float(),
                         num_groups=self.num_group, topk_group=self.topk_group,
                         renorm=bool(self.norm_topk_prob),
                         scaling=float(self.routed_scaling_factor))
    return logits, w, ids


# transformers' router modules (by class name) and the forward that routes
# through tuned.router_topk, each returning what the module's own does
# (router logits, weights, ids) by the same rules
_ROUTERS = {
    "MixtralTopKRouter": _mixtral_router,
    "Qwen3MoeTopKRouter": _qwen_router,
    "Qwen2MoeTopKRouter": _qwen_router,
    "DeepseekV3TopkRouter": _deepseek_v3_router,
}


def apply_routers(model):
    """Routes model's MoE routers (the transformers classes in _ROUTERS)
    through tuned.router_topk; returns how many were routed."""
    n = 0
    for module in model.modules():
        fn = _ROUTERS.get(type(module).__name__)
        if fn is not None:
            module.forward = types.MethodType(fn, module)
            n += 1
    return n


def apply(model, inplace_backward=True, linear=False, routers=True, **linear_options):
    """Routes model's causal-LM loss through tuned.cross_entropy (sets
    model.loss_function), or with linear=True through
    tuned.linear_cross_entropy from the hidden states (the module says
    how; linear_options go to it), and with routers (the default) its MoE
    routers through tuned.router_topk; returns model."""
    if routers:
        apply_routers(model)
    if not hasattr(type(model), "loss_function"):
        raise TypeError(f"tuned.integrations.transformers.apply: {type(model).__name__} has no "
                        "loss_function to replace (a transformers PreTrainedModel has)")
    if linear_options and not linear:
        raise TypeError(f"tuned.integrations.transformers.apply: {sorted(linear_options)} "
                        "apply to linear=True only")
    if not linear:
        model.loss_function = functools.partial(causal_lm_loss,
                                                inplace_backward=inplace_backward)
        return model
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, torch.nn.Linear):
        raise TypeError("tuned.integrations.transformers.apply(linear=True): "
                        f"{type(model).__name__}'s output embeddings are not a torch.nn.Linear")
    softcap, scale = _head_transform(getattr(model, "config", None))
    options = {"softcap": softcap, "scale": scale, **linear_options}
    state = _LinearHead(head, options)
    # hooks, not a new forward: the model's forward keeps its signature
    # (transformers' Trainer reads it to choose the dataset's columns)
    model.register_forward_pre_hook(state.model_pre_hook, with_kwargs=True)
    model.register_forward_hook(state.model_post_hook, with_kwargs=True, always_call=True)
    head.register_forward_pre_hook(state.head_pre_hook)
    model.loss_function = state.loss
    return model
