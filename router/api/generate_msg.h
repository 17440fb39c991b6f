/* generate_msg: turn a validated OpenAI request into the wire's Generate message (sampling
 * defaults filled explicitly, since proto3 cannot tell "unset" from zero), built once per choice.
 */
#ifndef SOL_GENERATE_MSG_H
#define SOL_GENERATE_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "oai_request.h"
#include "sol.pb-c.h"

/* One choice's Generate envelope. It borrows the request's strings, so it must be freed before
 * the request; the broker packs it once per attempt (frame_size + frame_pack) and never decodes
 * it. */
typedef struct genmsg genmsg;

/* The envelope for choice `choice` of `req`, checked once against the wire's rules
 * (frame_validate): -EINVAL with the reason for a field the wire refuses, -ENOMEM. */
int genmsg_new(const oai_request *req, const char *request_id, uint32_t choice, genmsg **out,
               sol_err *e);
Sol__Envelope *genmsg_envelope(genmsg *m);
void genmsg_free(genmsg *m);

#endif
