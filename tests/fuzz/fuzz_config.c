/* fuzz_config: arbitrary bytes as a YAML config file must load or fail with a message — never
 * crash, hang or leak — and whatever loads must print back to YAML that loads to the same text. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

static char *print_to_string(const sol_config *cfg) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    sol_config_print(cfg, f, SOL_CONFIG_BOTH);
    fclose(f);
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    sol_config cfg;
    sol_config_defaults(&cfg);
    sol_err err = {0};
    if (sol_config_load_string(&cfg, text, "fuzz.yaml", &err) == 0) {
        char *once = print_to_string(&cfg);
        sol_config again;
        sol_config_defaults(&again);
        if (once && sol_config_load_string(&again, once, "printed.yaml", &err) != 0) {
            fprintf(stderr, "printed config does not load back: %s\n%s", err.msg, once);
            abort();
        }
        char *twice = once ? print_to_string(&again) : NULL;
        if (once && twice && strcmp(once, twice) != 0) abort();
        free(once);
        free(twice);
        sol_config_free(&again);
    } else if (err.msg[0] == '\0') {
        abort(); /* every failure must say why */
    }
    sol_config_free(&cfg);
    free(text);
    return 0;
}
