/* tiers GASPI: the types and constants of the GASPI specification (gaspi.de), with the
 * integer widths, enum values and configuration layout of the reference implementation so
 * that programs built for it run unchanged. Part of tiers (MIT OR Apache-2.0). */
#ifndef TIERS_GASPI_TYPES_H
#define TIERS_GASPI_TYPES_H

#ifdef __cplusplus
extern "C" {
#endif

typedef char gaspi_char;
typedef unsigned char gaspi_uchar;
typedef short gaspi_short;
typedef unsigned short gaspi_ushort;
typedef int gaspi_int;
typedef unsigned int gaspi_uint;
typedef long gaspi_long;
typedef unsigned long gaspi_ulong;
typedef float gaspi_float;
typedef double gaspi_double;

typedef unsigned long gaspi_timeout_t;        /* milliseconds, or GASPI_BLOCK / GASPI_TEST */
typedef unsigned short gaspi_rank_t;
typedef unsigned char gaspi_group_t;
typedef unsigned int gaspi_number_t;
typedef void *gaspi_pointer_t;
typedef void *gaspi_reduce_state_t;
typedef unsigned char gaspi_queue_id_t;
typedef unsigned long gaspi_size_t;
typedef unsigned char gaspi_segment_id_t;
typedef unsigned long gaspi_offset_t;
typedef unsigned long gaspi_atomic_value_t;
typedef float gaspi_time_t;
typedef unsigned long gaspi_cycles_t;
typedef unsigned int gaspi_notification_id_t;
typedef unsigned int gaspi_notification_t;
typedef unsigned int gaspi_statistic_counter_t;
typedef char *gaspi_string_t;
typedef int gaspi_memory_description_t;

static const gaspi_group_t GASPI_GROUP_ALL = 0;
static const gaspi_timeout_t GASPI_BLOCK = 0xffffffffffffffffUL;
static const gaspi_timeout_t GASPI_TEST = 0x0;

typedef enum {
  GASPI_ERROR = -1,
  GASPI_SUCCESS = 0,
  GASPI_TIMEOUT = 1,
  GASPI_ERR_EMFILE = 2,
  GASPI_ERR_ENV = 3,
  GASPI_ERR_SN_PORT = 4,
  GASPI_ERR_CONFIG = 5,
  GASPI_ERR_NOINIT = 6,
  GASPI_ERR_INITED = 7,
  GASPI_ERR_NULLPTR = 8,
  GASPI_ERR_INV_SEGSIZE = 9,
  GASPI_ERR_INV_SEG = 10,
  GASPI_ERR_INV_GROUP = 11,
  GASPI_ERR_INV_RANK = 12,
  GASPI_ERR_INV_QUEUE = 13,
  GASPI_ERR_INV_LOC_OFF = 14,
  GASPI_ERR_INV_REM_OFF = 15,
  GASPI_ERR_INV_COMMSIZE = 16,
  GASPI_ERR_INV_NOTIF_VAL = 17,
  GASPI_ERR_INV_NOTIF_ID = 18,
  GASPI_ERR_INV_NUM = 19,
  GASPI_ERR_INV_SIZE = 20,
  GASPI_ERR_MANY_SEG = 21,
  GASPI_ERR_MANY_GRP = 22,
  GASPI_QUEUE_FULL = 23,
  GASPI_ERR_UNALIGN_OFF = 24,
  GASPI_ERR_ACTIVE_COLL = 25,
  GASPI_ERR_DEVICE = 26,
  GASPI_ERR_SN = 27,
  GASPI_ERR_MEMALLOC = 28
} gaspi_return_t;

typedef enum { GASPI_OP_MIN = 0, GASPI_OP_MAX = 1, GASPI_OP_SUM = 2 } gaspi_operation_t;

typedef enum {
  GASPI_TYPE_INT = 0,
  GASPI_TYPE_UINT = 1,
  GASPI_TYPE_FLOAT = 2,
  GASPI_TYPE_DOUBLE = 3,
  GASPI_TYPE_LONG = 4,
  GASPI_TYPE_ULONG = 5
} gaspi_datatype_t;

/* A user reduction: result = op(one, two), element-wise over num elements of element_size. */
typedef gaspi_return_t (*gaspi_reduce_operation_t) (gaspi_pointer_t const one,
                                                    gaspi_pointer_t const two,
                                                    gaspi_pointer_t const result,
                                                    gaspi_reduce_state_t const state,
                                                    const gaspi_number_t num,
                                                    const gaspi_size_t element_size,
                                                    const gaspi_timeout_t timeout);

/* Networks: tiers accepts every one of these (gaspi_config_set refuses others) and picks its
   own engine (shm, local, tcp, mpi). */
typedef enum {
  GASPI_IB = 0,
  GASPI_ROCE = 1,
  GASPI_ETHERNET = 2,
  GASPI_GEMINI = 3,
  GASPI_ARIES = 4,
  GASPI_OFI = 5
} gaspi_network_t;

typedef struct {
  gaspi_network_t network_type;
  struct {
    struct { gaspi_int netdev_id; gaspi_uint mtu; gaspi_uint port_check; } ib;
    struct { gaspi_uint port; } tcp;
    struct { int use_shm; int provider_info; int progress_auto; } ofi;
  } params;
} gaspi_dev_config_t;

typedef enum {
  GASPI_MEM_UNINITIALIZED = 0,
  GASPI_MEM_INITIALIZED = 1,
  GASPI_ALLOC_DEFAULT = GASPI_MEM_UNINITIALIZED
} gaspi_alloc_t;

typedef enum { GASPI_STATE_HEALTHY = 0, GASPI_STATE_CORRUPT = 1 } gaspi_state_t;
typedef gaspi_state_t *gaspi_state_vector_t;

typedef enum {
  GASPI_STATISTIC_ARGUMENT_NONE,
  GASPI_STATISTIC_ARGUMENT_RANK
} gaspi_statistic_argument_t;

typedef enum {
  GASPI_TOPOLOGY_NONE = 0,
  GASPI_TOPOLOGY_STATIC = 1,
  GASPI_TOPOLOGY_DYNAMIC = 2
} gaspi_topology_t;

/* The configuration (gaspi_config_get / gaspi_config_set before gaspi_proc_init). */
typedef struct gaspi_config {
  gaspi_uint logger;
  gaspi_uint sn_port;
  gaspi_uint net_info;
  gaspi_uint user_net;
  gaspi_int sn_persistent;
  gaspi_timeout_t sn_timeout;
  gaspi_dev_config_t dev_config;
  gaspi_network_t network;
  gaspi_uint queue_size_max;                /* requests a queue holds between two waits */
  gaspi_uint queue_num;                     /* queues created at init */
  gaspi_number_t group_max;
  gaspi_number_t segment_max;
  gaspi_size_t transfer_size_max;
  gaspi_number_t notification_num;          /* notifications per segment */
  gaspi_number_t passive_queue_size_max;
  gaspi_number_t passive_transfer_size_max;
  gaspi_size_t allreduce_buf_size;
  gaspi_number_t allreduce_elem_max;
  gaspi_number_t rw_list_elem_max;
  gaspi_topology_t build_infrastructure;
  void *user_defined;
} gaspi_config_t;

/* The same layout as the library's (checked by the library's own tests too). */
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && defined(__LP64__)
_Static_assert (sizeof (gaspi_config_t) == 144, "gaspi_config_t layout");
_Static_assert (sizeof (gaspi_dev_config_t) == 32, "gaspi_dev_config_t layout");
_Static_assert (sizeof (gaspi_return_t) == 4, "gaspi_return_t width");
#endif

#ifdef __cplusplus
}
#endif
#endif
