"""tuned.integrations.transformers: a transformers causal LM's loss through
tuned.cross_entropy, in one line.

    import tuned.integrations.transformers as tt
    tt.apply(model)                 # model(input_ids, labels=...) now uses it
    tt.apply(model, inplace_backward=False)

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
falls back to torch where its kernels do not apply."""

import functools

import torch

from ..cross_entropy import cross_entropy

__all__ = ["apply", "causal_lm_loss"]


def causal_lm_loss(logits, labels, vocab_size, num_items_in_batch=None, ignore_index=-100,
                   shift_labels=None, *, inplace_backward=True, **kwargs):
    """transformers' ForCausalLMLoss through tuned.cross_entropy (its
    arguments; extra keyword arguments transformers passes are ignored)."""
    if shift_labels is None:
        labels = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)
        shift_labels = labels[..., 1:]
    shift_labels = shift_labels.reshape(-1).to(logits.device)
    rows = logits.reshape(-1, vocab_size)
    # In place needs reduction mean or sum, and the logits as an
    # intermediate (a leaf's storage is the caller's).
    inplace = (bool(inplace_backward) and torch.is_grad_enabled() and rows.requires_grad and
               not rows.is_leaf)
    if num_items_in_batch is None:
        return cross_entropy(rows, shift_labels, ignore_index=ignore_index, reduction="mean",
                             inplace_backward=inplace)
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(logits.device)
    # the division carried by the kernel's gradient: the backward moves nothing
    return cross_entropy(rows, shift_labels, ignore_index=ignore_index, reduction="sum",
                         inplace_backward=inplace, num_items=num_items_in_batch)


def apply(model, inplace_backward=True):
    """Routes model's causal-LM loss through tuned.cross_entropy (sets
    model.loss_function); returns model."""
    if not hasattr(type(model), "loss_function"):
        raise TypeError(f"tuned.integrations.transformers.apply: {type(model).__name__} has no "
                        "loss_function to replace (a transformers PreTrainedModel has)")
    model.loss_function = functools.partial(causal_lm_loss, inplace_backward=inplace_backward)
    return model
