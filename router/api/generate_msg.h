/* generate_msg: turn a validated OpenAI request into the wire's Generate message (sampling
 * defaults filled explicitly, since proto3 cannot tell "unset" from zero). */
#ifndef SOL_GENERATE_MSG_H
#define SOL_GENERATE_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "oai_request.h"

/* Encode a Generate envelope for `req` with `request_id` into a new malloc'd buffer (the caller
 * frees *out). Errors (a field the wire refuses) come back as -EINVAL with the reason. */
int genmsg_encode(const oai_request *req, const char *request_id, uint32_t choice, uint8_t **out,
                  size_t *len, sol_err *e);

#endif
