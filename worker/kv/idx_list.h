/* idx_list: a doubly linked list over the ids 0..n-1 of a caller's array, the links held here,
 * head the oldest: the least-recently-used and first-in orders of the KV bookkeeping. */
#ifndef SOL_IDX_LIST_H
#define SOL_IDX_LIST_H

#include <stdint.h>

typedef struct idx_list {
    int32_t *prev, *next; /* -1 at the ends and for ids not in the list */
    int32_t head, tail;   /* -1 when empty */
} idx_list;

/* n ids, none in the list. 0 or -ENOMEM. */
int idx_list_init(idx_list *l, int32_t n);
void idx_list_destroy(idx_list *l);
/* Takes id i (which must be in the list) out. */
void idx_list_unlink(idx_list *l, int32_t i);
/* Puts id i (not in the list) at the tail: the newest. */
void idx_list_push_tail(idx_list *l, int32_t i);

#endif
