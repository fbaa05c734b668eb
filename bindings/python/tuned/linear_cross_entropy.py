"""tuned.linear_cross_entropy: the cross-entropy of hidden @ weight.T (+
bias) against labels, with its gradients to hidden, weight and bias,
without ever holding the whole logits (tokens x vocabulary).

Rows of hidden go through in chunks. Each chunk's logits (chunk x V, in
hidden's dtype) come from one GEMM (torch.mm / addmm: cuBLAS on CUDA, and
the same call on every other device), then tuned's cross-entropy kernels
(tuned.cross_entropy's operators, or on CUDA in eager mode their
implementations) take them:

  mean, sum  the fused kernel writes each row's loss and, over the
             chunk's logits, their gradient (for an upstream gradient of
             1, times 1/count for mean: the count of rows not ignored,
             taken on the device); two more GEMMs turn it into the chunk's
             rows of d hidden and its share of d weight (and d bias). The
             forward computes the gradients, and the backward multiplies
             them by the upstream gradient (two elementwise passes, over
             d hidden and d weight; nothing when no gradient is wanted).
  none       the forward runs the loss kernel (one read) and keeps each
             row's lse; the backward makes each chunk's logits again and
             runs the backward kernel with the per-row upstream gradient.
             fp16 mean and sum take this path too, reduced afterwards: the
             fused gradient, rounded to fp16 at 1/count in the forward,
             would lose the entries a loss scaler keeps.

  blocks     (vocab_splits S > 1; mean and sum, any device) a
             chunk's logits are made a block of V / S columns at a time
             into a buffer of chunk x V / S: every block once for its
             log-sum-exp (the loss kernel, labels ignored), the last one
             kept; the rows' losses from the lse, the target logit and
             (with smoothing) the logits' sum; then each block's gradient
             by the backward kernel in place over a class slice (labels
             index the whole vocabulary), the kept block first, the
             others made again. S - 1 of S logits GEMMs are paid twice;
             the d weight GEMM then runs at chunk rows, where at Liger's
             memory (256 rows of an 8B model's 128256 columns) it sums a
             weight-sized d weight over K = 256 rows every chunk: half of
             the block's time (docs/decisions.md).

Memory beyond the inputs and the gradients: one chunk of logits (two with
softcap; a block of V / S columns with vocab_splits S), whose rows are
chunk_rows (default: as many rows as fit
max_chunk_bytes, 256 MiB, in multiples of 64; at least 64). d weight is
accumulated in weight's dtype over the chunks (as Liger's fused linear
cross-entropy does: each GEMM sums in fp32, the running sum is rounded
once a chunk), unless accumulate_fp32 (an fp32 buffer of weight's size,
and a weight-sized product a chunk).

The chunk size and its vocabulary blocks, when neither chunk_rows nor
vocab_splits is given on CUDA, are the stored winner of the kind
linear_cross_entropy for (tokens, vocabulary, hidden, the budget
max_chunk_bytes in MiB, dtype, GPU): the tuner measures the whole loss
block (GEMMs and kernels, forward and backward) at each chunk the budget
allows, in whole rows up to the budget's and in the fewest vocabulary
blocks that fit it above ("chunk2048.v17"), and stores the fastest as it
stores any winner (the daemon and the fleet share it). libtuned's lookup
asks for that tune under its policies (the daemon, a child tuned process)
when no record exists, and answers meanwhile with the rule above, which
is also what every other case takes (CPU, no libtuned, a budget or
hidden size the key cannot name).

Options are tuned.cross_entropy's: ignore_index, label_smoothing, z_loss,
scale, softcap (Gemma 2's tanh cap, applied to each chunk's logits by
torch, its derivative applied to the chunk's gradient), reduction and
num_items (a sum divided by a count: transformers' gradient
accumulation).
"""

import math

import torch

from . import _ce_direct
from .cross_entropy import (_DIRECT, _OPERATORS, _compiling, _dispatch_modes, _grad_torch,
                            _label_masks, _loss_rows)

__all__ = ["linear_cross_entropy"]

_REDUCTIONS = ("none", "sum", "mean")
_DEFAULT_CHUNK_BYTES = 256 << 20


def _ops(x):
    """The cross-entropy calls for chunks like x: on CUDA in eager mode
    the operators' implementations (their dispatch costs more host time a
    chunk than the kernels at small chunks), else the operators."""
    if x.is_cuda and type(x) is torch.Tensor and not _compiling() and not _dispatch_modes():
        return _DIRECT
    return _OPERATORS


def _chunk_rows(rows, cols, esize, chunk_rows, max_chunk_bytes):
    if chunk_rows is not None:
        return max(1, min(int(chunk_rows), rows))
    fit = max_chunk_bytes // max(1, cols * esize)
    return max(1, min(rows, max(64, fit // 64 * 64)))


def _parse_chunk(config):
    """(rows, vocabulary blocks) of a chunk config's text, "chunk1024" (1
    block: whole rows) or "chunk2048.v17", or None for any other text."""
    if not config.startswith("chunk"):
        return None
    rows, dot, blocks = config[5:].partition(".")
    if not (rows.isascii() and rows.isdigit()) or int(rows) < 1:
        return None
    if not dot:
        return int(rows), 1
    count = blocks[1:]
    if not blocks.startswith("v") or not (count.isascii() and count.isdigit()) or int(count) < 2:
        return None
    return int(rows), int(count)


def _tuned_chunk(h, w, max_chunk_bytes):
    """(chunk rows, vocabulary blocks) that libtuned's store holds (or its
    lookup answers) for this call's key, or None where no key applies (a
    budget that is not whole MiB; a hidden size or budget outside the
    key's ranges, which libtuned's lookup refuses, naming the rule) or
    libtuned cannot say: the caller then takes the rule."""
    from . import handle as _handle
    from .errors import LibraryError, TunedError
    from .torch_ops import _DTYPES
    rows, hidden, cols = h.shape[0], h.shape[1], w.shape[0]
    mib, rest = divmod(int(max_chunk_bytes), 1 << 20)
    if not h.is_cuda or h.dtype not in _DTYPES or _compiling() or rest != 0:
        return None
    device = h.device.index if h.device.index is not None else -1
    try:
        hd = _handle._default or _handle.default_handle()
        # an exact winner does not change: asked once per key and handle,
        # not every step (a lookup without one may scan the store for the
        # nearest, and asks again until a tune has stored the key's own)
        key = (id(hd), rows, cols, hidden, mib, h.dtype, device)
        chunk = _exact_chunks.get(key)
        if chunk is not None:
            return chunk
        choice = hd.lookup(rows, cols, dtype=_DTYPES[h.dtype], device=device,
                           kernel="linear_cross_entropy",
                           params=f"hidden={hidden},budget={mib}")
    except (LibraryError, TunedError, ValueError, OSError):
        return None
    parsed = _parse_chunk(choice.config)
    if parsed is None:
        return None
    chunk = (max(1, min(parsed[0], rows)), parsed[1])
    if choice.source == "exact":
        if len(_exact_chunks) > 256:
            _exact_chunks.clear()
        _exact_chunks[key] = chunk
    return chunk


# (handle, tokens, vocabulary, hidden, budget MiB, dtype, device) -> the
# stored winner's (chunk rows, vocabulary blocks), for keys whose lookup
# answered exact
_exact_chunks = {}


class _Chunk:
    """One chunk's logits, capped when softcap is set: (the logits the
    kernels take, the derivative of the cap to multiply their gradient by,
    or None)."""

    def __init__(self, h, weight, bias, softcap, buf):
        # into the call's one chunk buffer: a new tensor a chunk would keep
        # two chunks alive while the next one's GEMM runs
        z = buf[:h.shape[0]]
        if bias is None:
            torch.mm(h, weight.t(), out=z)
        else:
            torch.addmm(bias, h, weight.t(), out=z)
        if softcap is None:
            self.logits, self.dcap = z, None
            return
        # t = tanh(z / c); the logits c t; the cap's derivative 1 - t^2
        t = z.div_(softcap).tanh_()
        self.logits = t * softcap
        self.dcap = t.square_().neg_().add_(1.0)

    def grad(self, g):
        """The gradient to the uncapped logits from g, the capped ones'."""
        return g if self.dcap is None else g.mul_(self.dcap)


def _chunk_buffer(chunk, hidden, weight, splits=1):
    """The logits' buffer of one chunk (of its widest vocabulary block),
    reused by every chunk of a call."""
    rows = min(chunk, hidden.shape[0])
    cols = _split_bounds(weight.shape[0], splits)[1]
    return torch.empty((rows, cols), dtype=hidden.dtype, device=hidden.device)


def _split_bounds(cols, splits):
    """The first column of each of splits vocabulary blocks, and cols: the
    blocks as even as multiples of 64 columns make them (rows of a block
    then start 128-byte aligned); fewer blocks where cols is short."""
    if splits <= 1 or cols <= 64:
        return [0, cols]
    per_block = -(-cols // splits)  # cols / splits, rounded up
    step = -(-per_block // 64) * 64
    return list(range(0, cols, step)) + [cols]


def _block(h, weight, bias, softcap, buf, v0, v1):
    """Columns v0:v1 of the logits of rows h, in buf's first elements: a
    _Chunk over a (rows, v1 - v0) view."""
    rows, cols = h.shape[0], v1 - v0
    view = buf.view(-1)[:rows * cols].view(rows, cols)
    return _Chunk(h, weight[v0:v1], None if bias is None else bias[v0:v1], softcap, view)


class _LinearCrossEntropyFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, scale, smoothing, z_loss, ignore_index,
                reduction, num_items, softcap, chunk, accumulate_fp32, splits):
        ops = _ops(hidden)
        rows = hidden.shape[0]
        cols = weight.shape[0]
        ctx.reduction = reduction
        ctx.params = (scale, smoothing, z_loss, ignore_index)
        ctx.chunk, ctx.softcap, ctx.ops = chunk, softcap, ops
        ctx.accumulate_fp32 = accumulate_fp32
        ctx.backward_done = False
        if reduction == "none":
            # whole rows, as many as a block's buffer holds
            chunk = ctx.chunk = max(1, chunk // splits)
            loss = torch.empty(rows, dtype=torch.float32, device=hidden.device)
            lse = torch.empty(rows, dtype=torch.float32, device=hidden.device)
            lse_lo = torch.empty(rows, dtype=torch.float32, device=hidden.device)
            buf = _chunk_buffer(chunk, hidden, weight)
            for c0 in range(0, rows, chunk):
                c1 = min(rows, c0 + chunk)
                part = _Chunk(hidden[c0:c1], weight, bias, softcap, buf)
                lo, ls, ll = ops.loss(part.logits, labels[c0:c1], scale, smoothing, z_loss,
                                      ignore_index)
                loss[c0:c1] = lo
                lse[c0:c1] = ls
                lse_lo[c0:c1] = ll
            ctx.save_for_backward(hidden, weight, bias, labels, lse, lse_lo)
            return loss
        need = ctx.needs_input_grad
        if reduction == "mean":
            # 1/count on the device (count 0: inf, and the loss 0 * inf
            # = NaN, as torch's 0/0)
            gs = (labels != ignore_index).sum().to(torch.float32).reciprocal().reshape(())
        elif num_items is not None:
            gs = torch.as_tensor(num_items, dtype=torch.float32,
                                 device=hidden.device).reshape(()).reciprocal()
        else:
            gs = torch.ones((), dtype=torch.float32, device=hidden.device)
        grad_h = torch.empty_like(hidden) if need[0] else None
        acc_dtype = torch.float32 if accumulate_fp32 else weight.dtype
        grad_w = _grad_w_buffer(weight, acc_dtype, rows) if need[1] else None
        grad_b = (torch.zeros(cols, dtype=torch.float32, device=hidden.device)
                  if bias is not None and need[2] else None)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        buf = _chunk_buffer(chunk, hidden, weight, splits)
        blocks = _split_bounds(cols, splits)
        ignored = (torch.full((min(chunk, rows),), ignore_index, dtype=labels.dtype,
                              device=labels.device) if len(blocks) > 2 else None)
        for c0 in range(0, rows, chunk):
            c1 = min(rows, c0 + chunk)
            h = hidden[c0:c1]
            if len(blocks) > 2:
                lo, lse, last = _blocks_chunk(h, weight, bias, labels[c0:c1], ctx.params,
                                              softcap, blocks, buf, ignored[:c1 - c0],
                                              ops is _DIRECT)
                total += lo.sum()
                _blocks_grads(h, weight, bias, labels[c0:c1], gs, ctx.params, softcap, blocks,
                              buf, lse, last, ops is _DIRECT, grad_h, grad_w, grad_b, c0, c1)
                del last
                continue
            part = _Chunk(h, weight, bias, softcap, buf)
            lo, _ = ops.fused_inplace(part.logits, labels[c0:c1], gs, scale, smoothing, z_loss,
                                      ignore_index)
            total += lo.sum()
            # the kernel wrote d loss / d logits over the logits
            _chunk_grads(part.grad(part.logits), h, weight, grad_h, grad_w, grad_b, c0, c1)
        ctx.w_dtype = weight.dtype
        ctx.first_chunk, ctx.cols = min(chunk, rows), cols
        ctx.b_dtype = None if bias is None else bias.dtype
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        return total * gs

    @staticmethod
    def backward(ctx, dloss):
        if ctx.reduction == "none":
            return _backward_none(ctx, dloss)
        if ctx.backward_done:
            raise RuntimeError("tuned.linear_cross_entropy: the backward of reduction 'mean' or "
                               "'sum' runs once (its gradients, computed in the forward, are "
                               "scaled in place); for a second backward use reduction='none'")
        ctx.backward_done = True
        grad_h, grad_w, grad_b = ctx.saved_tensors
        # The forward's gradients assumed an upstream gradient of 1: times
        # the real one, an fp32 scalar (the products formed in fp32).
        f = dloss.to(torch.float32).reshape(())
        _scale_by(f, [t for t in (grad_h, grad_w) if t is not None], ctx.first_chunk,
                  ctx.cols)
        if grad_w is not None:
            grad_w = grad_w.to(ctx.w_dtype)
        if grad_b is not None:
            grad_b = grad_b.mul_(f).to(ctx.b_dtype)
        return (grad_h, grad_w, grad_b) + (None,) * 11


def _scale_by(f, tensors, chunk, cols):
    """tensors *= f (a 0-dim fp32 tensor on their device), in place, with
    no host synchronisation. On CUDA in eager mode by the fused
    cross-entropy's rescale kernel (tuned_cross_entropy_rescale, which
    moves nothing when f is 1), over each tensor seen flat as blocks of
    the chunk's logits (chunk x cols: the layout the forward's fused calls
    ran on this handle), the rest by mul_: mul_ and _foreach_mul_ by a
    device scalar run torch's unvectorised broadcast kernel, 2.1 to 2.4
    ms over an 8B model's d weight (1 GB) on the H200
    (bench/lce_profile.py), where a pass at bandwidth takes 0.5."""
    per = chunk * cols
    for t in tensors:
        done = 0
        if t.is_cuda and _ops(t) is _DIRECT and t.is_contiguous() and per > 0:
            flat = t.view(-1)
            while done + per <= flat.numel() and _ce_direct.rescale(
                    flat[done:done + per].view(chunk, cols), f):
                done += per
        if done < t.numel():
            t.view(-1)[done:].mul_(f)


def _blocks_chunk(h, weight, bias, labels, params, softcap, blocks, buf, ignored, direct):
    """(loss, lse, last) of rows h over vocabulary blocks (bounds
    `blocks`), each block's logits made into buf in turn: per block its
    lse (the loss kernel with every label ignored; torch's logsumexp where
    libtuned is not called), the target logit where the label falls in
    it, and with smoothing the logits' sum; then each row's loss from the
    whole row's lse (cross_entropy's _loss_rows); last is the last block's
    _Chunk, whose logits are still held. lse - s x_y in fp32 is exact to a
    few ulp of lse: the mean's terms, not a row's, are what the chunked
    call returns."""
    scale, eps, z_loss, ignore_index = params
    rows, vocab = h.shape[0], weight.shape[0]
    nblocks, step = len(blocks) - 1, blocks[1] - blocks[0]
    f32 = dict(dtype=torch.float32, device=h.device)
    lses = torch.empty((nblocks, rows), **f32)
    sum_x = torch.zeros(rows, **f32) if eps != 0.0 else None
    # Each row's label as (block, column in it), once a chunk: the blocks
    # are step columns wide but the last (_split_bounds). A block's loop
    # then costs the host four calls (the GEMM, the loss kernel, the lse's
    # copy, a gather), where the label's masks made a block took twelve:
    # the lse pass's GEMMs take about 100 us a block at 2048 x 8064, not
    # much more than the host's calls.
    valid, bad, _, _ = _label_masks(labels, ignore_index, vocab)
    ok = valid & ~bad
    label = torch.where(ok, labels.long(), 0)
    block_of = torch.div(label, step, rounding_mode="floor").clamp_(max=nblocks - 1)
    column = (label - block_of * step).unsqueeze(1)
    column_last = column.clamp(max=blocks[-1] - blocks[-2] - 1)
    # the blocks' logits are buf's dtype (a softcap's too)
    picks = torch.empty((nblocks, rows, 1), dtype=buf.dtype, device=buf.device)
    for b, (v0, v1) in enumerate(zip(blocks[:-1], blocks[1:])):
        part = _block(h, weight, bias, softcap, buf, v0, v1)
        z = part.logits
        got = _ce_direct.loss(z, ignored, scale, 0.0, 0.0, ignore_index) if direct else None
        lses[b] = got[1] if got is not None else torch.logsumexp(z.float() * scale, dim=1)
        # column 0..step-1 of every row: in bounds in any block (the last
        # block's clamped); only the label's block's pick is kept
        torch.gather(z, 1, column_last if b == nblocks - 1 else column, out=picks[b])
        if sum_x is not None:
            sum_x += z.sum(1, dtype=torch.float32)
    lse = torch.logsumexp(lses, dim=0)
    picked = picks.squeeze(2).gather(0, block_of.unsqueeze(0)).squeeze(0)
    x_y = torch.where(ok, picked.float(), 0.0)
    mean = scale * sum_x / vocab if sum_x is not None else None
    loss, _ = _loss_rows(lse, scale * x_y, mean, eps, z_loss, valid, bad)
    return loss, lse, part


def _block_grad_(z, labels, lse, gs, params, v0, vocab, direct):
    """d loss / d z over z, the logits of columns v0:v0 + cols of whole
    rows of vocab, in place: the backward kernel over a class slice (the
    label's term only in the block that holds it); torch's formula of the
    same where libtuned is not called."""
    scale, eps, z_loss, ignore_index = params
    if direct and _ce_direct.backward(z, labels, lse, gs.reshape(1), scale, eps, z_loss,
                                      ignore_index, out=z, class_offset=v0,
                                      classes=vocab) is not None:
        return z
    return z.copy_(_grad_torch(z, labels, lse, gs, scale, eps, z_loss, ignore_index,
                               class_offset=v0, classes=vocab))


def _blocks_grads(h, weight, bias, labels, gs, params, softcap, blocks, buf, lse, last, direct,
                  grad_h, grad_w, grad_b, c0, c1):
    """The chunk's gradients, a vocabulary block at a time: the last
    block's logits (last, _blocks_chunk's) first, then each other
    block's made again; d hidden sums the blocks' products, d weight and
    d bias take each block's rows."""
    vocab = weight.shape[0]
    final = len(blocks) - 2
    for n, b in enumerate([final] + list(range(final))):
        v0, v1 = blocks[b], blocks[b + 1]
        part = last if n == 0 else _block(h, weight, bias, softcap, buf, v0, v1)
        g = part.grad(_block_grad_(part.logits, labels, lse, gs, params, v0, vocab, direct))
        _chunk_grads(g, h, weight[v0:v1], grad_h,
                     None if grad_w is None else grad_w[v0:v1],
                     None if grad_b is None else grad_b[v0:v1], c0, c1, add_h=n > 0)


def _chunk_grads(g, h, weight, grad_h, grad_w, grad_b, c0, c1, add_h=False):
    """A chunk's share of the gradients from g, d loss / d logits of rows
    c0:c1 (h their hidden states): its rows of d hidden (add_h: added to
    what they hold, a vocabulary block's share), and its sums into d weight
    and d bias (those that are wanted, i.e. not None)."""
    if grad_h is not None and add_h:
        torch.addmm(grad_h[c0:c1], g, weight, out=grad_h[c0:c1])
    elif grad_h is not None:
        torch.mm(g, weight, out=grad_h[c0:c1])
    if grad_w is not None:
        _accumulate(grad_w, g, h, first=c0 == 0)
    if grad_b is not None:
        grad_b += g.sum(0, dtype=torch.float32)


def _grad_w_buffer(weight, dtype, rows):
    """d weight's buffer: in weight's dtype left unwritten, which the first
    chunk's GEMM writes whole (no zeroing pass over a weight-sized
    tensor); zeros where the chunks add into it otherwise (an fp32 sum,
    or no rows)."""
    if dtype == weight.dtype and rows > 0:
        return torch.empty(weight.shape, dtype=dtype, device=weight.device)
    return torch.zeros(weight.shape, dtype=dtype, device=weight.device)


def _accumulate(grad_w, g, h, first=False):
    """grad_w += g.T @ h (first: grad_w = g.T @ h, its buffer unwritten):
    in place in one GEMM where the dtypes agree (the GEMM sums in fp32 and
    rounds the total once), else through a weight-sized product in g's
    dtype (accumulate_fp32)."""
    if grad_w.dtype == g.dtype and first:
        torch.mm(g.t(), h, out=grad_w)
    elif grad_w.dtype == g.dtype:
        torch.addmm(grad_w, g.t(), h, out=grad_w)
    else:
        grad_w += torch.mm(g.t(), h)


def _backward_none(ctx, dloss):
    hidden, weight, bias, labels, lse, lse_lo = ctx.saved_tensors
    need = ctx.needs_input_grad
    rows, chunk = hidden.shape[0], ctx.chunk
    dloss = dloss.to(torch.float32).contiguous()
    grad_h = torch.empty_like(hidden) if need[0] else None
    acc_dtype = torch.float32 if ctx.accumulate_fp32 else weight.dtype
    grad_w = _grad_w_buffer(weight, acc_dtype, rows) if need[1] else None
    grad_b = (torch.zeros(weight.shape[0], dtype=torch.float32, device=hidden.device)
              if bias is not None and need[2] else None)
    buf = _chunk_buffer(chunk, hidden, weight)
    for c0 in range(0, rows, chunk):
        c1 = min(rows, c0 + chunk)
        h = hidden[c0:c1]
        part = _Chunk(h, weight, bias, ctx.softcap, buf)
        g = ctx.ops.backward(part.logits, labels[c0:c1], lse[c0:c1], dloss[c0:c1], *ctx.params,
                             lse_lo=lse_lo[c0:c1])
        _chunk_grads(part.grad(g), h, weight, grad_h, grad_w, grad_b, c0, c1)
    if grad_w is not None:
        grad_w = grad_w.to(weight.dtype)
    if grad_b is not None:
        grad_b = grad_b.to(bias.dtype)
    return (grad_h, grad_w, grad_b) + (None,) * 11


def _check(hidden, weight, bias, labels, reduction, label_smoothing, z_loss, scale, softcap,
           num_items, chunk_rows, max_chunk_bytes, vocab_splits):
    for name, t in (("hidden", hidden), ("weight", weight), ("labels", labels)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tuned.linear_cross_entropy: {name} must be a tensor")
    if weight.dim() != 2:
        raise ValueError(f"tuned.linear_cross_entropy: weight must be (V, H), not "
                         f"{tuple(weight.shape)}")
    if hidden.dim() < 1 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"tuned.linear_cross_entropy: hidden {tuple(hidden.shape)} does not "
                         f"end in weight's H = {weight.shape[1]}")
    if tuple(labels.shape) != tuple(hidden.shape[:-1]):
        raise ValueError(f"tuned.linear_cross_entropy: labels of shape {tuple(labels.shape)} "
                         f"for hidden of shape {tuple(hidden.shape)} (expected "
                         f"{tuple(hidden.shape[:-1])})")
    if labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
        raise ValueError(f"tuned.linear_cross_entropy: labels must be class indices, not "
                         f"{labels.dtype}")
    if not hidden.dtype.is_floating_point or hidden.dtype != weight.dtype:
        raise ValueError(f"tuned.linear_cross_entropy: hidden ({hidden.dtype}) and weight "
                         f"({weight.dtype}) must share one floating dtype")
    if bias is not None and (not isinstance(bias, torch.Tensor) or
                             tuple(bias.shape) != (weight.shape[0],)):
        raise ValueError(f"tuned.linear_cross_entropy: bias must be a ({weight.shape[0]},) "
                         "tensor or None")
    if hidden.device != weight.device or labels.device != hidden.device:
        raise ValueError("tuned.linear_cross_entropy: hidden, weight and labels must be on "
                         "one device")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"tuned.linear_cross_entropy: reduction {reduction!r} (none, sum or "
                         "mean)")
    if num_items is not None and reduction != "sum":
        raise ValueError("tuned.linear_cross_entropy: num_items divides a reduction 'sum'")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"tuned.linear_cross_entropy: label_smoothing {label_smoothing} "
                         "(it must be in [0, 1])")
    if not (z_loss >= 0.0 and math.isfinite(z_loss)):
        raise ValueError(f"tuned.linear_cross_entropy: z_loss {z_loss} (>= 0 and finite)")
    if not (scale > 0.0 and math.isfinite(scale)):
        raise ValueError(f"tuned.linear_cross_entropy: scale {scale} (positive and finite)")
    if softcap is not None and not (softcap > 0.0 and math.isfinite(softcap)):
        raise ValueError(f"tuned.linear_cross_entropy: softcap {softcap} (None, or positive "
                         "and finite)")
    if chunk_rows is not None and int(chunk_rows) < 1:
        raise ValueError(f"tuned.linear_cross_entropy: chunk_rows {chunk_rows} (at least 1)")
    if vocab_splits is not None and (isinstance(vocab_splits, bool) or
                                     int(vocab_splits) != vocab_splits or vocab_splits < 1):
        raise ValueError(f"tuned.linear_cross_entropy: vocab_splits {vocab_splits!r} (None, or "
                         "a whole number of at least 1)")
    if not max_chunk_bytes > 0:
        raise ValueError(f"tuned.linear_cross_entropy: max_chunk_bytes {max_chunk_bytes} "
                         "(positive)")


def linear_cross_entropy(hidden, weight, labels, bias=None, ignore_index=-100,
                         reduction="mean", label_smoothing=0.0, *, z_loss=0.0, scale=1.0,
                         softcap=None, num_items=None, chunk_rows=None,
                         max_chunk_bytes=_DEFAULT_CHUNK_BYTES, accumulate_fp32=False,
                         vocab_splits=None):
    """Cross-entropy of hidden @ weight.T (+ bias) against labels, as
    tuned.cross_entropy(hidden @ weight.T + bias, labels, ...) would give
    it, with the logits never held whole (the module says how).

    hidden (..., H), weight (V, H) (an LM head's: tied embeddings too), bias
    (V,) or None, labels (...) of class indices; hidden and weight share a
    dtype (fp16, bf16 or fp32 on CUDA; any floating dtype elsewhere, by
    torch's formula). reduction "mean" (over the rows not ignored), "sum",
    or "none" (one loss a row, labels' shape); the loss is fp32.
    chunk_rows: rows of hidden a chunk. vocab_splits S: each chunk's
    logits made in S blocks of the vocabulary (the module says how; mean
    and sum; "none" takes chunks of whole rows in the same buffer), so
    that at a given max_chunk_bytes a chunk holds S times the rows. With
    neither given, on CUDA the store's winner within max_chunk_bytes of
    logits (rows and blocks), else what fits it in whole rows; with
    vocab_splits alone, the rows that fit it in S blocks.
    accumulate_fp32: sum d weight over the chunks in fp32."""
    _check(hidden, weight, bias, labels, reduction, label_smoothing, z_loss, scale, softcap,
           num_items, chunk_rows, max_chunk_bytes, vocab_splits)
    lead = tuple(hidden.shape[:-1])
    device_type = hidden.device.type
    autocast = (device_type in ("cuda", "cpu") and torch.is_autocast_enabled(device_type))
    if autocast:
        # autocast's GEMM dtype, cast here (differentiably: the gradients
        # reach fp32 parameters), and no autocast inside, where the chunks'
        # buffers are made in one dtype
        dt = torch.get_autocast_dtype(device_type)
        hidden, weight = hidden.to(dt), weight.to(dt)
        bias = bias.to(dt) if bias is not None else None
        with torch.autocast(device_type, enabled=False):
            return linear_cross_entropy(hidden, weight, labels, bias, ignore_index, reduction,
                                        label_smoothing, z_loss=z_loss, scale=scale,
                                        softcap=softcap, num_items=num_items,
                                        chunk_rows=chunk_rows, max_chunk_bytes=max_chunk_bytes,
                                        accumulate_fp32=accumulate_fp32,
                                        vocab_splits=vocab_splits)
    h = hidden.reshape(-1, hidden.shape[-1])
    if not h.is_contiguous():
        h = h.contiguous()
    lab = labels.reshape(-1)
    if lab.dtype not in (torch.int32, torch.int64):
        lab = lab.long()
    lab = lab.contiguous()
    w = weight if weight.is_contiguous() else weight.contiguous()
    if h.shape[0] == 0:
        # no rows: zero gradients (connected, so that backward runs), and
        # mean's 0/0 NaN from a constant
        zero = h.sum(dtype=torch.float32) * 0.0 + w.sum(dtype=torch.float32) * 0.0
        if reduction == "none":
            return torch.zeros(lead, dtype=torch.float32, device=h.device) + zero
        if reduction == "mean":
            return zero + torch.full((), float("nan"), dtype=torch.float32, device=h.device)
        return zero
    need_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (h, w, bias))
    splits = int(vocab_splits or 1)
    tuned = (None if chunk_rows is not None or vocab_splits is not None
             else _tuned_chunk(h, w, max_chunk_bytes))
    if tuned is not None:
        chunk, splits = tuned
    else:
        block = _split_bounds(w.shape[0], splits)[1]
        chunk = _chunk_rows(h.shape[0], block, h.element_size(), chunk_rows, max_chunk_bytes)
    # The rows' losses, reduced here: without a gradient (the loss kernel
    # alone, no gradient GEMMs), and for fp16 with one, so that the
    # backward forms the gradients with the upstream one (a loss scaler's
    # factor), not the forward at 1/count in fp16 (tuned.cross_entropy
    # does the same)
    split = reduction != "none" and (not need_grad or h.dtype == torch.float16)
    loss = _LinearCrossEntropyFn.apply(h, w, bias, lab, float(scale), float(label_smoothing),
                                       float(z_loss), int(ignore_index),
                                       "none" if split else reduction, num_items,
                                       None if softcap is None else float(softcap), chunk,
                                       bool(accumulate_fp32), splits)
    if split:
        if reduction == "mean":
            return loss.sum() / (lab != ignore_index).sum()
        return loss.sum() / num_items if num_items is not None else loss.sum()
    return loss.view(lead) if reduction == "none" else loss
