//! Thread geometry and other per-thread hardware facts.
//!
//! On the GPU these read PTX special registers. On the host they report a launch of one
//! block of one thread (the CPU emulator replaces this with the emulated geometry).

/// A three-component index or extent (`threadIdx`, `blockDim`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dim3 {
    /// x component.
    pub x: u32,
    /// y component.
    pub y: u32,
    /// z component.
    pub z: u32,
}

#[cfg(target_arch = "nvptx64")]
mod imp {
    use super::Dim3;
    use core::arch::nvptx;

    #[inline(always)]
    pub fn thread_idx() -> Dim3 {
        // SAFETY: reading special registers has no preconditions.
        unsafe {
            Dim3 {
                x: nvptx::_thread_idx_x() as u32,
                y: nvptx::_thread_idx_y() as u32,
                z: nvptx::_thread_idx_z() as u32,
            }
        }
    }
    #[inline(always)]
    pub fn block_idx() -> Dim3 {
        // SAFETY: reading special registers has no preconditions.
        unsafe {
            Dim3 {
                x: nvptx::_block_idx_x() as u32,
                y: nvptx::_block_idx_y() as u32,
                z: nvptx::_block_idx_z() as u32,
            }
        }
    }
    #[inline(always)]
    pub fn block_dim() -> Dim3 {
        // SAFETY: reading special registers has no preconditions.
        unsafe {
            Dim3 {
                x: nvptx::_block_dim_x() as u32,
                y: nvptx::_block_dim_y() as u32,
                z: nvptx::_block_dim_z() as u32,
            }
        }
    }
    #[inline(always)]
    pub fn grid_dim() -> Dim3 {
        // SAFETY: reading special registers has no preconditions.
        unsafe {
            Dim3 {
                x: nvptx::_grid_dim_x() as u32,
                y: nvptx::_grid_dim_y() as u32,
                z: nvptx::_grid_dim_z() as u32,
            }
        }
    }
    #[inline(always)]
    pub fn trap() -> ! {
        // SAFETY: `trap` aborts the kernel; it has no preconditions.
        unsafe { nvptx::trap() }
    }
}

#[cfg(not(target_arch = "nvptx64"))]
mod imp {
    use super::Dim3;
    const ZERO: Dim3 = Dim3 { x: 0, y: 0, z: 0 };
    const ONE: Dim3 = Dim3 { x: 1, y: 1, z: 1 };
    pub fn thread_idx() -> Dim3 {
        ZERO
    }
    pub fn block_idx() -> Dim3 {
        ZERO
    }
    pub fn block_dim() -> Dim3 {
        ONE
    }
    pub fn grid_dim() -> Dim3 {
        ONE
    }
    pub fn trap() -> ! {
        std::process::abort()
    }
}

/// This thread's index within its block (`%tid`).
#[doc(alias = "threadIdx")]
#[inline(always)]
pub fn thread_idx() -> Dim3 {
    imp::thread_idx()
}

/// This block's index within the grid (`%ctaid`).
#[doc(alias = "blockIdx")]
#[inline(always)]
pub fn block_idx() -> Dim3 {
    imp::block_idx()
}

/// The number of threads per block (`%ntid`).
#[doc(alias = "blockDim")]
#[inline(always)]
pub fn block_dim() -> Dim3 {
    imp::block_dim()
}

/// The number of blocks in the grid (`%nctaid`).
#[doc(alias = "gridDim")]
#[inline(always)]
pub fn grid_dim() -> Dim3 {
    imp::grid_dim()
}

/// Aborts the kernel (`trap`): the launch fails and the host sees an error.
#[inline(always)]
pub fn trap() -> ! {
    imp::trap()
}
