/* log: leveled logging to stderr, as plain text or one JSON object per line.
 * Settings are written once by main() before any thread starts and are read-only afterwards. */
#ifndef SOL_LOG_H
#define SOL_LOG_H

typedef enum {
    SOL_LOG_DEBUG = 0,
    SOL_LOG_INFO,
    SOL_LOG_WARN,
    SOL_LOG_ERROR,
    SOL_LOG_OFF
} sol_log_level;

/* Called from main() only. `component` names the process ("router", "worker"). */
void sol_log_setup(sol_log_level level, int json, const char *component);

/* Parse "debug|info|warn|error|off"; returns -1 for anything else. */
int sol_log_level_parse(const char *s);
const char *sol_log_level_name(sol_log_level level);

void sol_log(sol_log_level level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define LOG_DEBUG(mod, ...) sol_log(SOL_LOG_DEBUG, mod, __VA_ARGS__)
#define LOG_INFO(mod, ...) sol_log(SOL_LOG_INFO, mod, __VA_ARGS__)
#define LOG_WARN(mod, ...) sol_log(SOL_LOG_WARN, mod, __VA_ARGS__)
#define LOG_ERROR(mod, ...) sol_log(SOL_LOG_ERROR, mod, __VA_ARGS__)

#endif
