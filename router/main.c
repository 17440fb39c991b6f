/* sol-router entry point (placeholder until the router issue lands). */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        puts("usage: sol-router [--config FILE]");
        return 0;
    }
    fprintf(stderr, "sol-router: not implemented yet\n");
    return 1;
}
