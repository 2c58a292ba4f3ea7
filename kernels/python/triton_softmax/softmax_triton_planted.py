"""Three bugs Triton users really write, each planted in a copy of the tutorial's fused softmax
kernel (``softmax_triton.py``) and launched exactly as the tutorial launches its own. Each
kernel differs from the tutorial's in the lines marked ``PLANTED``; each wrapper writes into an
output it is given (``softmax(x, out=y)`` style), so what the kernel writes lands in cudafuzz's
guarded allocation.

The third bug Triton users hit, 32-bit offsets, needs no planting: the tutorial's own kernel
computes ``row_idx * input_row_stride`` in 32 bits (``triton_softmax_offsets32.toml``).
"""

import triton
import triton.language as tl

from softmax_triton import launch


@triton.jit
def softmax_kernel_unmasked_store(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                                  BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        input_ptrs = row_start_ptr + col_offsets
        mask = col_offsets < n_cols
        row = tl.load(input_ptrs, mask=mask, other=-float('inf'))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        output_ptrs = output_row_start_ptr + col_offsets
        # PLANTED: the store's mask is missing, so the block's lanes past the row's end
        # (BLOCK_SIZE is n_cols rounded up to a power of two) write too.
        tl.store(output_ptrs, softmax_output)


@triton.jit
def softmax_kernel_input_stride(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                                BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        input_ptrs = row_start_ptr + col_offsets
        mask = col_offsets < n_cols
        row = tl.load(input_ptrs, mask=mask, other=-float('inf'))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        # PLANTED: the output is assumed to be laid out like the input (true of
        # `torch.empty_like(x)` for a contiguous x, not of an output the caller passes).
        output_row_start_ptr = output_ptr + row_idx * input_row_stride
        output_ptrs = output_row_start_ptr + col_offsets
        tl.store(output_ptrs, softmax_output, mask=mask)


def softmax_unmasked_store(x, y):
    """y = softmax(x), through the kernel whose store is unmasked."""
    launch(softmax_kernel_unmasked_store, y, x)


def softmax_input_stride(x, y):
    """y = softmax(x), through the kernel that addresses y with x's row stride."""
    launch(softmax_kernel_input_stride, y, x)
