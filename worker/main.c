/* sol-worker entry point (placeholder until the worker issue lands). */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        puts("usage: sol-worker [--config FILE]");
        return 0;
    }
    fprintf(stderr, "sol-worker: not implemented yet\n");
    return 1;
}
