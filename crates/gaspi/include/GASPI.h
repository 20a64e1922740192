/* tiers GASPI: the GASPI API (the GASPI specification, gaspi.de), implemented by tiers over
 * its cluster tier (libtiers_gaspi, installed also as libGPI2). Part of tiers. */
#ifndef TIERS_GASPI_H
#define TIERS_GASPI_H
#include "GASPI_types.h"
#ifdef __cplusplus
extern "C" {
#endif
/* Configuration, start and end */
gaspi_return_t gaspi_config_get (gaspi_config_t *const config);
gaspi_return_t gaspi_config_set (const gaspi_config_t new_config);
gaspi_return_t gaspi_version (float *version);
gaspi_return_t gaspi_proc_init (const gaspi_timeout_t timeout);
gaspi_return_t gaspi_proc_term (const gaspi_timeout_t timeout);
gaspi_return_t gaspi_proc_rank (gaspi_rank_t *const rank);
gaspi_return_t gaspi_proc_num (gaspi_rank_t *const proc_num);
gaspi_return_t gaspi_proc_kill (const gaspi_rank_t rank, const gaspi_timeout_t timeout);
gaspi_return_t gaspi_connect (const gaspi_rank_t rank, const gaspi_timeout_t timeout);
gaspi_return_t gaspi_disconnect (const gaspi_rank_t rank, const gaspi_timeout_t timeout);
/* Groups */
gaspi_return_t gaspi_group_create (gaspi_group_t *const group);
gaspi_return_t gaspi_group_delete (const gaspi_group_t group);
gaspi_return_t gaspi_group_add (const gaspi_group_t group, const gaspi_rank_t rank);
gaspi_return_t gaspi_group_commit (const gaspi_group_t group, const gaspi_timeout_t timeout);
gaspi_return_t gaspi_group_num (gaspi_number_t *const group_num);
gaspi_return_t gaspi_group_size (const gaspi_group_t group, gaspi_number_t *const group_size);
gaspi_return_t gaspi_group_ranks (const gaspi_group_t group, gaspi_rank_t *const group_ranks);
gaspi_return_t gaspi_group_max (gaspi_number_t *const group_max);
/* Segments */
gaspi_return_t gaspi_segment_alloc (const gaspi_segment_id_t segment_id, const gaspi_size_t size,
                                    const gaspi_alloc_t alloc_policy);
gaspi_return_t gaspi_segment_delete (const gaspi_segment_id_t segment_id);
gaspi_return_t gaspi_segment_register (const gaspi_segment_id_t segment_id,
                                       const gaspi_rank_t rank, const gaspi_timeout_t timeout);
gaspi_return_t gaspi_segment_create (const gaspi_segment_id_t segment_id, const gaspi_size_t size,
                                     const gaspi_group_t group, const gaspi_timeout_t timeout,
                                     const gaspi_alloc_t alloc_policy);
gaspi_return_t gaspi_segment_bind (gaspi_segment_id_t const segment_id,
                                   gaspi_pointer_t const pointer, gaspi_size_t const size,
                                   gaspi_memory_description_t const memory_description);
gaspi_return_t gaspi_segment_use (gaspi_segment_id_t const segment_id,
                                  gaspi_pointer_t const pointer, gaspi_size_t const size,
                                  gaspi_group_t const group, gaspi_timeout_t const timeout,
                                  gaspi_memory_description_t const memory_description);
gaspi_return_t gaspi_segment_num (gaspi_number_t *const segment_num);
gaspi_return_t gaspi_segment_list (const gaspi_number_t num,
                                   gaspi_segment_id_t *const segment_id_list);
gaspi_return_t gaspi_segment_ptr (const gaspi_segment_id_t segment_id, gaspi_pointer_t *ptr);
gaspi_return_t gaspi_segment_max (gaspi_number_t *const segment_max);
/* One-sided communication */
gaspi_return_t gaspi_write (const gaspi_segment_id_t segment_id_local,
                            const gaspi_offset_t offset_local, const gaspi_rank_t rank,
                            const gaspi_segment_id_t segment_id_remote,
                            const gaspi_offset_t offset_remote, const gaspi_size_t size,
                            const gaspi_queue_id_t queue, const gaspi_timeout_t timeout);
gaspi_return_t gaspi_read (const gaspi_segment_id_t segment_id_local,
                           const gaspi_offset_t offset_local, const gaspi_rank_t rank,
                           const gaspi_segment_id_t segment_id_remote,
                           const gaspi_offset_t offset_remote, const gaspi_size_t size,
                           const gaspi_queue_id_t queue, const gaspi_timeout_t timeout);
gaspi_return_t gaspi_write_list (const gaspi_number_t num, gaspi_segment_id_t *const segment_id_local,
                                 gaspi_offset_t *const offset_local, const gaspi_rank_t rank,
                                 gaspi_segment_id_t *const segment_id_remote,
                                 gaspi_offset_t *const offset_remote, gaspi_size_t *const size,
                                 const gaspi_queue_id_t queue, const gaspi_timeout_t timeout);
gaspi_return_t gaspi_read_list (const gaspi_number_t num, gaspi_segment_id_t *const segment_id_local,
                                gaspi_offset_t *const offset_local, const gaspi_rank_t rank,
                                gaspi_segment_id_t *const segment_id_remote,
                                gaspi_offset_t *const offset_remote, gaspi_size_t *const size,
                                const gaspi_queue_id_t queue, const gaspi_timeout_t timeout);
gaspi_return_t gaspi_wait (const gaspi_queue_id_t queue, const gaspi_timeout_t timeout);
/* Collectives */
gaspi_return_t gaspi_barrier (const gaspi_group_t group, const gaspi_timeout_t timeout);
gaspi_return_t gaspi_allreduce (const gaspi_pointer_t buffer_send, gaspi_pointer_t const buffer_receive,
                                const gaspi_number_t num, const gaspi_operation_t operation,
                                const gaspi_datatype_t datatype, const gaspi_group_t group,
                                const gaspi_timeout_t timeout);
gaspi_return_t gaspi_allreduce_user (const gaspi_pointer_t buffer_send,
                                     gaspi_pointer_t const buffer_receive, const gaspi_number_t num,
                                     const gaspi_size_t element_size,
                                     gaspi_reduce_operation_t const reduce_operation,
                                     gaspi_reduce_state_t const reduce_state,
                                     const gaspi_group_t group, const gaspi_timeout_t timeout);
/* Atomics (8-byte words, 8-byte aligned offsets) */
gaspi_return_t gaspi_atomic_fetch_add (const gaspi_segment_id_t segment_id,
                                       const gaspi_offset_t offset, const gaspi_rank_t rank,
                                       const gaspi_atomic_value_t val_add,
                                       gaspi_atomic_value_t *const val_old,
                                       const gaspi_timeout_t timeout);
gaspi_return_t gaspi_atomic_compare_swap (const gaspi_segment_id_t segment_id,
                                          const gaspi_offset_t offset, const gaspi_rank_t rank,
                                          const gaspi_atomic_value_t comparator,
                                          const gaspi_atomic_value_t val_new,
                                          gaspi_atomic_value_t *const val_old,
                                          const gaspi_timeout_t timeout);
/* Passive (two-sided) communication */
gaspi_return_t gaspi_passive_send (const gaspi_segment_id_t segment_id_local,
                                   const gaspi_offset_t offset_local, const gaspi_rank_t rank,
                                   const gaspi_size_t size, const gaspi_timeout_t timeout);
gaspi_return_t gaspi_passive_receive (const gaspi_segment_id_t segment_id_local,
                                      const gaspi_offset_t offset_local,
                                      gaspi_rank_t *const rem_rank, const gaspi_size_t size,
                                      const gaspi_timeout_t timeout);
/* Notifications */
gaspi_return_t gaspi_notify (const gaspi_segment_id_t segment_id_remote, const gaspi_rank_t rank,
                             const gaspi_notification_id_t notification_id,
                             const gaspi_notification_t notification_value,
                             const gaspi_queue_id_t queue, const gaspi_timeout_t timeout);
gaspi_return_t gaspi_notify_waitsome (const gaspi_segment_id_t segment_id_local,
                                      const gaspi_notification_id_t notification_begin,
                                      const gaspi_number_t num,
                                      gaspi_notification_id_t *const first_id,
                                      const gaspi_timeout_t timeout);
gaspi_return_t gaspi_notify_reset (const gaspi_segment_id_t segment_id_local,
                                   const gaspi_notification_id_t notification_id,
                                   gaspi_notification_t *const old_notification_val);
gaspi_return_t gaspi_write_notify (const gaspi_segment_id_t segment_id_local,
                                   const gaspi_offset_t offset_local, const gaspi_rank_t rank,
                                   const gaspi_segment_id_t segment_id_remote,
                                   const gaspi_offset_t offset_remote, const gaspi_size_t size,
                                   const gaspi_notification_id_t notification_id,
                                   const gaspi_notification_t notification_value,
                                   const gaspi_queue_id_t queue, const gaspi_timeout_t timeout);
gaspi_return_t gaspi_write_list_notify (const gaspi_number_t num,
                                        gaspi_segment_id_t *const segment_id_local,
                                        gaspi_offset_t *const offset_local, const gaspi_rank_t rank,
                                        gaspi_segment_id_t *const segment_id_remote,
                                        gaspi_offset_t *const offset_remote,
                                        gaspi_size_t *const size,
                                        const gaspi_segment_id_t segment_id_notification,
                                        const gaspi_notification_id_t notification_id,
                                        const gaspi_notification_t notification_value,
                                        const gaspi_queue_id_t queue, const gaspi_timeout_t timeout);
gaspi_return_t gaspi_read_notify (const gaspi_segment_id_t segment_id_local,
                                  const gaspi_offset_t offset_local, const gaspi_rank_t rank,
                                  const gaspi_segment_id_t segment_id_remote,
                                  const gaspi_offset_t offset_remote, const gaspi_size_t size,
                                  const gaspi_notification_id_t notification_id,
                                  const gaspi_queue_id_t queue, const gaspi_timeout_t timeout);
gaspi_return_t gaspi_read_list_notify (const gaspi_number_t num,
                                       gaspi_segment_id_t *const segment_id_local,
                                       gaspi_offset_t *const offset_local, const gaspi_rank_t rank,
                                       gaspi_segment_id_t *const segment_id_remote,
                                       gaspi_offset_t *const offset_remote,
                                       gaspi_size_t *const size,
                                       const gaspi_segment_id_t segment_id_notification,
                                       const gaspi_notification_id_t notification_id,
                                       const gaspi_queue_id_t queue, const gaspi_timeout_t timeout);
/* Queues, limits, time, errors, state */
gaspi_return_t gaspi_queue_purge (const gaspi_queue_id_t queue, const gaspi_timeout_t timeout);
gaspi_return_t pgaspi_queue_purge (const gaspi_queue_id_t queue, const gaspi_timeout_t timeout);
gaspi_return_t gaspi_queue_size (const gaspi_queue_id_t queue, gaspi_number_t *const queue_size);
gaspi_return_t gaspi_queue_num (gaspi_number_t *const queue_num);
gaspi_return_t gaspi_queue_size_max (gaspi_number_t *const queue_size_max);
gaspi_return_t gaspi_queue_create (gaspi_queue_id_t *const queue, const gaspi_timeout_t timeout);
gaspi_return_t gaspi_queue_delete (const gaspi_queue_id_t queue);
gaspi_return_t gaspi_transfer_size_min (gaspi_size_t *const transfer_size_min);
gaspi_return_t gaspi_transfer_size_max (gaspi_size_t *const transfer_size_max);
gaspi_return_t gaspi_notification_num (gaspi_number_t *const notification_num);
gaspi_return_t gaspi_passive_transfer_size_min (gaspi_size_t *const passive_transfer_size_min);
gaspi_return_t gaspi_passive_transfer_size_max (gaspi_size_t *const passive_transfer_size_max);
gaspi_return_t gaspi_atomic_max (gaspi_atomic_value_t *max_value);
gaspi_return_t gaspi_allreduce_buf_size (gaspi_size_t *const buf_size);
gaspi_return_t gaspi_allreduce_elem_max (gaspi_number_t *const elem_max);
gaspi_return_t gaspi_queue_max (gaspi_number_t *const queue_max);
gaspi_return_t gaspi_network_type (gaspi_network_t *const network_type);
gaspi_return_t gaspi_build_infrastructure (gaspi_number_t *const build);
gaspi_return_t gaspi_time_ticks (gaspi_cycles_t *const ticks);
gaspi_return_t gaspi_time_get (gaspi_time_t *const wtime);
gaspi_return_t gaspi_print_error (gaspi_return_t error_code, gaspi_string_t *error_message);
gaspi_return_t gaspi_state_vec_get (gaspi_state_vector_t state_vector);
/* Statistics */
gaspi_return_t gaspi_statistic_verbosity_level (gaspi_number_t verbosity_level);
gaspi_return_t gaspi_statistic_counter_max (gaspi_number_t *counter_max);
gaspi_return_t gaspi_statistic_counter_info (gaspi_statistic_counter_t counter,
                                             gaspi_statistic_argument_t *counter_argument,
                                             gaspi_string_t *counter_name,
                                             gaspi_string_t *counter_description,
                                             gaspi_number_t *verbosity_level);
gaspi_return_t gaspi_statistic_counter_get (gaspi_statistic_counter_t counter,
                                            gaspi_number_t argument, unsigned long *value);
gaspi_return_t gaspi_statistic_counter_reset (gaspi_statistic_counter_t counter);
#ifdef __cplusplus
}
#endif
#endif
