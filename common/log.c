#define _POSIX_C_SOURCE 200809L
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* The single process-wide setting: written by main() before threads exist (see header),
 * so plain reads afterwards are race-free. */
static struct {
    sol_log_level level;
    int json;
    char component[32];
} g_log = {SOL_LOG_INFO, 0, "sol"};

static const char *const k_names[] = {"debug", "info", "warn", "error", "off"};

void sol_log_setup(sol_log_level level, int json, const char *component) {
    g_log.level = level;
    g_log.json = json;
    snprintf(g_log.component, sizeof g_log.component, "%s", component ? component : "sol");
}

int sol_log_level_parse(const char *s) {
    for (int i = 0; i <= SOL_LOG_OFF; i++)
        if (s && strcmp(s, k_names[i]) == 0) return i;
    return -1;
}

const char *sol_log_level_name(sol_log_level level) {
    return (level >= 0 && level <= SOL_LOG_OFF) ? k_names[level] : "?";
}

static void json_escape(FILE *f, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
}

void sol_log(sol_log_level level, const char *module, const char *fmt, ...) {
    if (level < g_log.level || level >= SOL_LOG_OFF) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    /* One fprintf per line keeps lines from different threads whole (stdio locks the stream). */
    flockfile(stderr);
    if (g_log.json) {
        fprintf(stderr, "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"proc\":\"%s\",\"module\":\"",
                when, ts.tv_nsec / 1000000L, k_names[level], g_log.component);
        json_escape(stderr, module ? module : "");
        fputs("\",\"msg\":\"", stderr);
        json_escape(stderr, msg);
        fputs("\"}\n", stderr);
    } else {
        fprintf(stderr, "%s.%03ldZ %-5s %s/%s: %s\n", when, ts.tv_nsec / 1000000L, k_names[level],
                g_log.component, module ? module : "", msg);
    }
    funlockfile(stderr);
}
