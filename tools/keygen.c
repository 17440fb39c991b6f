/* sol-keygen: writes a CURVE key pair for the router or a worker - NAME.key (secret, mode 0600)
 * and NAME.pub (the public key to give the other side). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "curve_keys.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: sol-keygen [-d DIR] NAME [NAME ...]\n"
            "Writes a CURVE key pair per NAME: DIR/NAME.key (public and secret key, mode 0600)\n"
            "and DIR/NAME.pub (the public key only). Never overwrites a file.\n"
            "  router:  sol-router --curve-secret-key router.key --curve-authorized-keys DIR\n"
            "           (DIR holds one .pub per admitted worker; add or remove files to rotate)\n"
            "  worker:  sol-worker --curve-secret-key w1.key --curve-server-key router.pub\n"
            "  -d, --dir DIR   where to write (default: the current directory)\n"
            "  -h, --help      this text\n");
}

int main(int argc, char **argv) {
    const char *dir = ".";
    int help = 0;
    const sol_arg args[] = {
        {"--dir", 'd', SOL_ARG_STR, &dir, 0, 0, 0, NULL, NULL, NULL},
        {"--help", 'h', SOL_ARG_SWITCH, &help, 0, 0, 0, NULL, NULL, NULL},
    };
    sol_err ae = {0};
    int npos = sol_args_parse(args, sizeof args / sizeof args[0], argc, argv, &ae);
    if (npos < 0) return fprintf(stderr, "sol-keygen: %s\n", ae.msg), 2;
    if (help) return usage(stdout), 0;
    if (npos == 0) return usage(stderr), 2;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "sol-keygen: %s is not a directory\n", dir);
        return 1;
    }
    for (int i = 1; i <= npos; i++) {
        const char *name = argv[i];
        if (!*name || strchr(name, '/')) {
            fprintf(stderr, "sol-keygen: '%s' is not a plain file name\n", name);
            return 2;
        }
        curve_pair p;
        sol_err e = {0};
        if (curve_keygen(dir, name, &p, &e)) {
            fprintf(stderr, "sol-keygen: %s\n", e.msg);
            return 1;
        }
        printf("%s/%s.key, %s/%s.pub: public key %s\n", dir, name, dir, name, p.public_key.z85);
    }
    return 0;
}
