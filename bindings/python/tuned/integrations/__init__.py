"""tuned.integrations: tuned's kernels in other libraries' models, one call
each (tuned.integrations.transformers.apply(model))."""
