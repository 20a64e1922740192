//! The C types of GASPI as the headers in `include/` declare them (layouts checked below and,
//! from C, by `_Static_assert`s in `GASPI_types.h`).
#![allow(non_camel_case_types, missing_docs)]

use std::ffi::c_void;

pub type gaspi_return_t = i32;
pub type gaspi_timeout_t = u64;
pub type gaspi_rank_t = u16;
pub type gaspi_group_t = u8;
pub type gaspi_number_t = u32;
pub type gaspi_queue_id_t = u8;
pub type gaspi_size_t = u64;
pub type gaspi_segment_id_t = u8;
pub type gaspi_offset_t = u64;
pub type gaspi_atomic_value_t = u64;
pub type gaspi_notification_id_t = u32;
pub type gaspi_notification_t = u32;

pub const GASPI_ERROR: i32 = -1;
pub const GASPI_SUCCESS: i32 = 0;
pub const GASPI_TIMEOUT: i32 = 1;
pub const GASPI_ERR_CONFIG: i32 = 5;
pub const GASPI_ERR_NOINIT: i32 = 6;
pub const GASPI_ERR_INITED: i32 = 7;
pub const GASPI_ERR_NULLPTR: i32 = 8;
pub const GASPI_ERR_INV_SEGSIZE: i32 = 9;
pub const GASPI_ERR_INV_SEG: i32 = 10;
pub const GASPI_ERR_INV_GROUP: i32 = 11;
pub const GASPI_ERR_INV_RANK: i32 = 12;
pub const GASPI_ERR_INV_QUEUE: i32 = 13;
pub const GASPI_ERR_INV_LOC_OFF: i32 = 14;
pub const GASPI_ERR_INV_REM_OFF: i32 = 15;
pub const GASPI_ERR_INV_COMMSIZE: i32 = 16;
pub const GASPI_ERR_INV_NOTIF_VAL: i32 = 17;
pub const GASPI_ERR_INV_NOTIF_ID: i32 = 18;
pub const GASPI_ERR_INV_NUM: i32 = 19;
pub const GASPI_ERR_INV_SIZE: i32 = 20;
pub const GASPI_ERR_MANY_SEG: i32 = 21;
pub const GASPI_ERR_MANY_GRP: i32 = 22;
pub const GASPI_QUEUE_FULL: i32 = 23;
pub const GASPI_ERR_UNALIGN_OFF: i32 = 24;
pub const GASPI_ERR_ACTIVE_COLL: i32 = 25;
pub const GASPI_ERR_MEMALLOC: i32 = 28;

/// `gaspi_statistic_argument_t`.
pub const GASPI_STATISTIC_ARGUMENT_NONE: i32 = 0;
pub const GASPI_STATISTIC_ARGUMENT_RANK: i32 = 1;

pub const GASPI_BLOCK: u64 = u64::MAX;
pub const GASPI_TEST: u64 = 0;

/// The names of the return codes, `-1..=28`.
pub const ERROR_STR: [&std::ffi::CStr; 30] = [
    c"general error",
    c"success",
    c"timeout",
    c"too many open files",
    c"incorrect environment vars",
    c"sn port already in use",
    c"invalid config parameter",
    c"not initialized",
    c"initialized twice",
    c"null pointer reference",
    c"invalid segment size",
    c"invalid segment",
    c"invalid group",
    c"invalid rank",
    c"invalid queue",
    c"invalid local offset",
    c"invalid remote offset",
    c"invalid size for communication",
    c"invalid notification value",
    c"invalid notification id",
    c"invalid number count",
    c"invalid size",
    c"too many segments",
    c"too many groups",
    c"queue is full",
    c"unaligned (8 bytes) offset",
    c"other collective is still active",
    c"device operation error",
    c"sn operation failed",
    c"memory allocation failed",
];

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbParams {
    pub netdev_id: i32,
    pub mtu: u32,
    pub port_check: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct OfiParams {
    pub use_shm: i32,
    pub provider_info: i32,
    pub progress_auto: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct DevParams {
    pub ib: IbParams,
    pub tcp_port: u32,
    pub ofi: OfiParams,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct gaspi_dev_config_t {
    pub network_type: i32,
    pub params: DevParams,
}

/// `gaspi_config_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct gaspi_config_t {
    pub logger: u32,
    pub sn_port: u32,
    pub net_info: u32,
    pub user_net: u32,
    pub sn_persistent: i32,
    pub sn_timeout: u64,
    pub dev_config: gaspi_dev_config_t,
    pub network: i32,
    pub queue_size_max: u32,
    pub queue_num: u32,
    pub group_max: u32,
    pub segment_max: u32,
    pub transfer_size_max: u64,
    pub notification_num: u32,
    pub passive_queue_size_max: u32,
    pub passive_transfer_size_max: u32,
    pub allreduce_buf_size: u64,
    pub allreduce_elem_max: u32,
    pub rw_list_elem_max: u32,
    pub build_infrastructure: i32,
    pub user_defined: *mut c_void,
}

// SAFETY: user_defined is an opaque value the library never dereferences.
unsafe impl Send for gaspi_config_t {}

const _: () = assert!(std::mem::size_of::<gaspi_config_t>() == 144);
const _: () = assert!(std::mem::size_of::<gaspi_dev_config_t>() == 32);
const _: () = assert!(std::mem::offset_of!(gaspi_config_t, queue_size_max) == 68);
const _: () = assert!(std::mem::offset_of!(gaspi_config_t, transfer_size_max) == 88);
const _: () = assert!(std::mem::offset_of!(gaspi_config_t, user_defined) == 136);

/// Queues a program may have (`gaspi_queue_max`).
pub const QUEUE_MAX: u32 = 16;
/// Group ids `0..GROUP_MAX` (`gaspi_config_t::group_max` may ask for all of them; 32 by default).
pub const GROUP_MAX: usize = 256;
/// Segment ids (`0..=254`, GPI-2's count).
pub const SEGMENT_MAX: u32 = 255;
/// Notifications per segment `gaspi_config_t::notification_num` may ask for: 8 bytes of
/// virtual memory each per segment (16 Mi of them take 128 MiB of each segment's heap space).
pub const NOTIFICATION_MAX: u32 = 1 << 24;
/// Bytes of an allreduce contribution (`gaspi_allreduce_buf_size` at most).
pub const REDUCE_SLOT: usize = 16384;

/// GPI-2's defaults, which programs and its tests expect.
pub fn default_config() -> gaspi_config_t {
    gaspi_config_t {
        logger: 1,
        sn_port: 12121,
        net_info: 0,
        user_net: 0,
        sn_persistent: 1,
        sn_timeout: 30000,
        dev_config: gaspi_dev_config_t {
            network_type: 2,
            params: DevParams {
                ib: IbParams {
                    netdev_id: -1,
                    mtu: 0,
                    port_check: 1,
                },
                tcp_port: 19000,
                ofi: OfiParams {
                    use_shm: 1,
                    provider_info: 0,
                    progress_auto: 1,
                },
            },
        },
        network: 2,
        queue_size_max: 1024,
        queue_num: 8,
        group_max: 32,
        segment_max: SEGMENT_MAX,
        transfer_size_max: 1 << 30,
        notification_num: 65536,
        passive_queue_size_max: 1024,
        passive_transfer_size_max: 65535,
        allreduce_buf_size: 255 * 8,
        allreduce_elem_max: 255,
        rw_list_elem_max: 255,
        build_infrastructure: 1,
        user_defined: std::ptr::null_mut(),
    }
}
