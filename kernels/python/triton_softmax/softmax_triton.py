"""Fused softmax from Triton's own tutorials (getting-started tutorial 02, "Fused Softmax"),
with its kernel unchanged and its host wrapper doing what the tutorial's does: the block size is
the row length's next power of two, the kernel is warmed up to read its register and shared
memory use, and a persistent grid of as many programs as the GPU keeps resident walks the rows.

The one restructuring: the tutorial's wrapper body is ``launch(kernel, y, x)``, so that the
planted-bug variants (``softmax_triton_planted.py``) launch their kernels exactly as the
tutorial launches its own.

What the tutorial leaves unsaid, and cudafuzz measures: ``row_idx * input_row_stride`` is a
product of two 32-bit integers (Triton passes an integer argument below 2**31 as ``i32``), so
a tensor whose element offsets pass 2**31 is read at wrapped addresses. ``triton_softmax.toml``
states that contract (``max_element_offset``); ``triton_softmax_offsets32.toml`` fuzzes the same
kernel without it.
"""

import torch
import triton
import triton.language as tl
from triton.runtime import driver


@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr,
                   num_stages: tl.constexpr):
    # starting row of the program
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        # The stride represents how much we need to increase the pointer to advance 1 row
        row_start_ptr = input_ptr + row_idx * input_row_stride
        # The block size is the next power of two greater than n_cols, so we can fit each
        # row in a single block
        col_offsets = tl.arange(0, BLOCK_SIZE)
        input_ptrs = row_start_ptr + col_offsets
        # Load the row into SRAM, using a mask since BLOCK_SIZE may be > than n_cols
        mask = col_offsets < n_cols
        row = tl.load(input_ptrs, mask=mask, other=-float('inf'))
        # Subtract maximum for numerical stability
        row_minus_max = row - tl.max(row, axis=0)
        # Note that exponentiation in Triton is fast but approximate (i.e., think __expf in CUDA)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        # Write back output to DRAM
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        output_ptrs = output_row_start_ptr + col_offsets
        tl.store(output_ptrs, softmax_output, mask=mask)


_properties = None


def _device_properties():
    global _properties
    if _properties is None:
        device = torch.cuda.current_device()
        _properties = driver.active.utils.get_device_properties(device)
    return _properties


def launch(kernel, y, x):
    """The tutorial's launch of ``kernel`` over the rows of ``x`` into ``y``."""
    properties = _device_properties()
    num_sm = properties["multiprocessor_count"]
    num_regs = properties["max_num_regs"]
    size_smem = properties["max_shared_mem"]
    warp_size = properties["warpSize"]
    n_rows, n_cols = x.shape
    # The block size of each loop iteration is the smallest power of two greater than the
    # number of columns in `x`
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    # Another trick we can use is to ask the compiler to use more threads per row by
    # increasing the number of warps (`num_warps`) over which each row is distributed.
    num_warps = 8
    # Number of software pipelining stages.
    num_stages = 4 if size_smem > 200000 else 2
    # pre-compile kernel to get register usage and compute thread occupancy.
    compiled = kernel.warmup(y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE=BLOCK_SIZE,
                             num_stages=num_stages, num_warps=num_warps, grid=(1, ))
    compiled._init_handles()
    n_regs = compiled.n_regs
    smem = compiled.metadata.shared
    occupancy = num_regs // (n_regs * warp_size * num_warps)
    occupancy = min(occupancy, size_smem // smem)
    num_programs = num_sm * occupancy
    num_programs = min(num_programs, n_rows)
    # Create a number of persistent programs.
    compiled[(num_programs, 1, 1)](y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE, num_stages)


def softmax(x):
    """The tutorial's ``softmax(x)``: allocates the output and returns it."""
    # Allocate output
    y = torch.empty_like(x)
    launch(softmax_kernel, y, x)
    return y
