"""host_memory.py: the CPU tests' stand-ins of libtuned read and write the
memory at the pointers they are given, as the library would: a tensor of
n elements copied from an address, and a tensor copied to one."""

import ctypes

import torch


def read(ptr, n, dtype):
    t = torch.empty(n, dtype=dtype)
    ctypes.memmove(t.data_ptr(), ptr, n * t.element_size())
    return t


def write(ptr, t):
    t = t.contiguous()
    ctypes.memmove(ptr, t.data_ptr(), t.numel() * t.element_size())
