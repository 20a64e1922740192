/* tiers GASPI: the deprecated thread helpers (threads of one rank). */
#ifndef TIERS_GASPI_THREADS_H
#define TIERS_GASPI_THREADS_H
#include "GASPI.h"
#ifdef __cplusplus
extern "C" {
#endif
gaspi_return_t gaspi_threads_get_tid (gaspi_int *const tid);
gaspi_return_t gaspi_threads_get_total (gaspi_int *const num);
gaspi_return_t gaspi_threads_get_num_cores (gaspi_int *const cores);
gaspi_return_t gaspi_threads_init (gaspi_int *const num);
gaspi_return_t gaspi_threads_init_user (const unsigned int use_nr_of_threads);
gaspi_return_t gaspi_threads_term (void);
gaspi_return_t gaspi_threads_run (void *(*function) (void *), void *arg);
gaspi_return_t gaspi_threads_register (gaspi_int *tid);
void gaspi_threads_sync (void);
gaspi_return_t gaspi_threads_sync_all (const gaspi_group_t g, const gaspi_timeout_t timeout);
#ifdef __cplusplus
}
#endif
#endif
