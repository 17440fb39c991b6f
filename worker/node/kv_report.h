/* kv_report: the KV events of a worker's heartbeats - the prompt-chain links its cache began or
 * ceased to hold since the last heartbeat, each once with its last state, or a snapshot of all it
 * holds (by tier) for a router that must forget what it was told (it just registered us, or events
 * were lost at the engine's bound). Link thread only. */
#ifndef SOL_KV_REPORT_H
#define SOL_KV_REPORT_H

#include <stdbool.h>

#include "executor.h"
#include "sol.pb-c.h"

typedef struct kv_report kv_report;

kv_report *kv_report_new(void); /* NULL on allocation failure */
void kv_report_free(kv_report *k);

/* Takes the executor's events since the last call (a new heartbeat round). Returns true when
 * some were lost: every router then needs a snapshot. */
bool kv_report_collect(kv_report *k, executor *x);

/* Sets hb's kv fields for one router of this round: the round's changes, or with `snapshot` every
 * link held now (taken once per round). The arrays stay valid until the next collect. */
void kv_report_fill(kv_report *k, executor *x, bool snapshot, Sol__Heartbeat *hb);

#endif
