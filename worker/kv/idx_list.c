/* idx_list: a doubly linked list over ids (idx_list.h). */
#include "idx_list.h"

#include <errno.h>
#include <stdlib.h>

int idx_list_init(idx_list *l, int32_t n) {
    l->prev = malloc(sizeof *l->prev * (size_t)(n > 0 ? n : 1));
    l->next = malloc(sizeof *l->next * (size_t)(n > 0 ? n : 1));
    l->head = l->tail = -1;
    if (!l->prev || !l->next) {
        idx_list_destroy(l);
        return -ENOMEM;
    }
    for (int32_t i = 0; i < n; i++)
        l->prev[i] = l->next[i] = -1;
    return 0;
}

void idx_list_destroy(idx_list *l) {
    free(l->prev);
    free(l->next);
    l->prev = l->next = NULL;
}

void idx_list_unlink(idx_list *l, int32_t i) {
    int32_t p = l->prev[i], n = l->next[i];
    if (p >= 0)
        l->next[p] = n;
    else
        l->head = n;
    if (n >= 0)
        l->prev[n] = p;
    else
        l->tail = p;
    l->prev[i] = l->next[i] = -1;
}

void idx_list_push_tail(idx_list *l, int32_t i) {
    l->prev[i] = l->tail;
    l->next[i] = -1;
    if (l->tail >= 0)
        l->next[l->tail] = i;
    else
        l->head = i;
    l->tail = i;
}
