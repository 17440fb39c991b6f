/* router_setup: build the router's parts (classifier, API keys, rate limiter, metrics, HTTP and
 * broker settings) from the `router:` section of a sol_config, with every unit and default mapped.
 */
#ifndef SOL_ROUTER_SETUP_H
#define SOL_ROUTER_SETUP_H

#include <stdbool.h>

#include "apikeys.h"
#include "broker.h"
#include "classify.h"
#include "config.h"
#include "http.h"
#include "metrics.h"
#include "ratelimit.h"

/* Used when router.routing.classifier.weights_file is null, a config file was given and this file
 * exists (relative to the working directory). */
#define ROUTER_DEFAULT_WEIGHTS "deploy/classifier/weights.txt"

typedef struct router_setup_opts {
    const char *served_model; /* model name clients may send besides pool names; NULL: any */
    bool config_file_given;   /* the default weights file applies only then (see docs/broker.md) */
} router_setup_opts;

typedef struct router_setup {
    classify *cls;
    apikeys *keys;      /* NULL: no authentication */
    ratelimit *limiter; /* NULL: off */
    metrics *metrics;
    http_config http; /* backend left empty: fill with broker_http_backend */
    broker_config broker;
    char host[64];
    const char *weights_used; /* the classifier file in use, or NULL */
} router_setup;

/* Everything borrowed from `cfg` must outlive the setup. Errors name the key or file. */
int router_setup_new(const sol_config *cfg, const router_setup_opts *opts, router_setup **out,
                     sol_err *e);
void router_setup_free(router_setup *s);

/* "HOST:PORT" → host (IPv4 dotted quad or "localhost") and port; -EINVAL with the reason. */
int router_parse_listen(const char *s, char *host, size_t cap, uint16_t *port, sol_err *e);

#endif
