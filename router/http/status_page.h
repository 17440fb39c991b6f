/* status_page: the router's live status page (pools, workers, throughput, latency), one
 * self-contained HTML document served at / and /ui; its data comes from /admin/workers and
 * /metrics. */
#ifndef SOL_STATUS_PAGE_H
#define SOL_STATUS_PAGE_H

#include <stddef.h>

/* The page (router/status_page.html, compiled in): NUL-terminated, status_page_len bytes. */
const char *status_page(size_t *len);

#endif
