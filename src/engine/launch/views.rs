//! The views a Python target is given: for each tensor of a planned case, the address of its
//! element 0, its shape, its element strides and its dtype. Pure arithmetic over the plan, so
//! the plumbing tests check on any machine (over a host image) what a GPU worker hands over
//! (over the device arena).

use crate::core::plan::Plan;
use crate::engine::arena::HostImage;

use super::call::{TensorView, ViewDevice};

/// The roster's views, in roster order; `data_ptr(i)` is the address of allocation `i`'s first
/// data byte (the case's byte offset already applied).
pub fn device_views(plan: &Plan, image: &HostImage, data_ptr: impl Fn(usize) -> u64, device: ViewDevice) -> Vec<TensorView> {
    debug_assert_eq!(plan.tensors.len(), image.layout.allocs.len());
    plan.tensors
        .iter()
        .map(|t| TensorView {
            name: t.name.clone(),
            ptr: data_ptr(t.index),
            shape: t.shape.iter().map(|&n| n as i64).collect(),
            strides: t.strides.iter().map(|&s| s as i64).collect(),
            dtype: t.dtype,
            device,
        })
        .collect()
}

/// The views of a host image: what the plumbing tests hand to a callable in place of the GPU.
pub fn host_views(plan: &Plan, image: &HostImage) -> Vec<TensorView> {
    device_views(plan, image, |i| image.bytes[i].as_ptr() as u64 + image.layout.allocs[i].data_offset, ViewDevice::Host)
}
