/* drafter_internal: the vtable behind drafter.h, shared by the drafter implementations.
 * Not for use outside worker/drafter*.c. */
#ifndef SOL_DRAFTER_INTERNAL_H
#define SOL_DRAFTER_INTERNAL_H

#include "drafter.h"

typedef struct drafter_ops {
    const char *name;
    int one_hot;
    int (*propose)(drafter *d, drafter_req *reqs, int n, sol_err *err);
    void (*release)(drafter *d, int32_t slot);
    void (*free)(drafter *d);
} drafter_ops;

struct drafter {
    const drafter_ops *ops;
};

#endif
