/* dtype.c: names and sizes of the element types (public API). */
#include <string.h>

#include "tuned.h"

const char *tuned_dtype_name(tuned_dtype dtype)
{
    switch (dtype) {
    case TUNED_FP16: return "fp16";
    case TUNED_BF16: return "bf16";
    case TUNED_FP32: return "fp32";
    }
    return NULL;
}

int tuned_dtype_parse(const char *name, tuned_dtype *out)
{
    static const struct {
        const char *name;
        tuned_dtype dtype;
    } names[] = {
        {"fp16", TUNED_FP16}, {"half", TUNED_FP16},     {"float16", TUNED_FP16},
        {"bf16", TUNED_BF16}, {"bfloat16", TUNED_BF16}, {"fp32", TUNED_FP32},
        {"float", TUNED_FP32}, {"float32", TUNED_FP32},
    };
    if (name == NULL || out == NULL)
        return TUNED_EINVAL;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].dtype;
            return 0;
        }
    }
    return TUNED_EINVAL;
}

size_t tuned_dtype_size(tuned_dtype dtype)
{
    switch (dtype) {
    case TUNED_FP16:
    case TUNED_BF16: return 2;
    case TUNED_FP32: return 4;
    }
    return 0;
}
