/* curve_keys: Z85 key files for the router/worker CURVE handshake (see curve_keys.h). */
#include "curve_keys.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

static bool valid_z85(const char *s, size_t n) {
    static const char alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   ".-:+=^!/*?&<>()[]{}@%$#";
    if (n != CURVE_KEY_LEN) return false;
    for (size_t i = 0; i < n; i++)
        if (!memchr(alphabet, s[i], sizeof alphabet - 1)) return false;
    uint8_t raw[32];
    char tmp[CURVE_KEY_LEN + 1];
    memcpy(tmp, s, n), tmp[n] = '\0';
    return zmq_z85_decode(raw, tmp) != NULL;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && strchr(" \t\r\n", s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* Reads `public-key` and (when secret is not NULL) `secret-key` from a key file. */
static int parse_file(const char *path, curve_key *pub, curve_key *secret, sol_err *e) {
    FILE *f = fopen(path, "r");
    if (!f) return sol_err_set(e, -errno, "%s: %s", path, strerror(errno));
    char line[256];
    int n = 0, rc = 0;
    bool have_pub = false, have_sec = false;
    while (!rc && fgets(line, sizeof line, f)) {
        n++;
        char *s = trim(line);
        if (!*s || *s == '#') continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = sol_err_set(e, -EINVAL, "%s:%d: expected 'public-key = KEY' or 'secret-key = KEY'",
                             path, n);
            break;
        }
        *eq = '\0';
        char *name = trim(s), *val = trim(eq + 1);
        curve_key *dst = !strcmp(name, "public-key")   ? pub
                         : !strcmp(name, "secret-key") ? secret
                                                       : NULL;
        if (!dst && strcmp(name, "secret-key"))
            rc = sol_err_set(e, -EINVAL, "%s:%d: unknown key '%s' (public-key, secret-key)", path,
                             n, name);
        else if (dst && !valid_z85(val, strlen(val)))
            rc = sol_err_set(e, -EINVAL, "%s:%d: %s is not %d Z85 characters", path, n, name,
                             CURVE_KEY_LEN);
        else if (dst) {
            memcpy(dst->z85, val, CURVE_KEY_LEN + 1);
            have_pub |= dst == pub, have_sec |= dst == secret;
        }
    }
    fclose(f);
    if (!rc && !have_pub) rc = sol_err_set(e, -EINVAL, "%s: no public-key line", path);
    if (!rc && secret && !have_sec) rc = sol_err_set(e, -EINVAL, "%s: no secret-key line", path);
    return rc;
}

int curve_load_pair(const char *path, curve_pair *out, sol_err *e) {
    int rc = parse_file(path, &out->public_key, &out->secret_key, e);
    if (rc) return rc;
    char derived[CURVE_KEY_LEN + 1];
    if (zmq_curve_public(derived, out->secret_key.z85) != 0)
        return sol_err_set(e, -ENOTSUP, "%s: cannot derive the public key (libzmq without CURVE?)",
                           path);
    if (strcmp(derived, out->public_key.z85))
        return sol_err_set(e, -EINVAL, "%s: public-key does not belong to secret-key", path);
    return 0;
}

int curve_load_public(const char *key_or_path, curve_key *out, sol_err *e) {
    if (!key_or_path || !*key_or_path) return sol_err_set(e, -EINVAL, "empty public key");
    if (valid_z85(key_or_path, strlen(key_or_path))) {
        memcpy(out->z85, key_or_path, CURVE_KEY_LEN + 1);
        return 0;
    }
    return parse_file(key_or_path, out, NULL, e);
}

static int write_file(const char *path, const char *text, mode_t mode, sol_err *e) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
    if (fd < 0) return sol_err_set(e, -errno, "%s: %s", path, strerror(errno));
    size_t n = strlen(text);
    ssize_t w = write(fd, text, n);
    int rc = w == (ssize_t)n ? 0 : sol_err_set(e, -EIO, "%s: short write", path);
    if (close(fd) != 0 && !rc) rc = sol_err_set(e, -errno, "%s: %s", path, strerror(errno));
    return rc;
}

static int keygen_files(const char *dir, const char *name, curve_pair *out, sol_err *e) {
    if (zmq_curve_keypair(out->public_key.z85, out->secret_key.z85) != 0)
        return sol_err_set(e, -ENOTSUP, "libzmq was built without CURVE: %s", zmq_strerror(errno));
    char path[4096], text[512];
    snprintf(path, sizeof path, "%s/%s.key", dir, name);
    snprintf(text, sizeof text,
             "# Sol CURVE key pair (ZeroMQ Z85). Keep this file secret: it is %s's identity.\n"
             "public-key = %s\nsecret-key = %s\n",
             name, out->public_key.z85, out->secret_key.z85);
    int rc = write_file(path, text, 0600, e);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/%s.pub", dir, name);
    snprintf(text, sizeof text, "# Sol CURVE public key of %s (ZeroMQ Z85)\npublic-key = %s\n",
             name, out->public_key.z85);
    return write_file(path, text, 0644, e);
}

int curve_keygen(const char *dir, const char *name, curve_pair *out, sol_err *e) {
    curve_pair p;
    int rc = keygen_files(dir, name, &p, e);
    if (!rc) *out = p;
    memset(&p, 0, sizeof p);
    return rc;
}

static bool is_pub(const char *name) {
    size_t n = strlen(name);
    return n > 4 && !strcmp(name + n - 4, ".pub") && name[0] != '.';
}

int curve_authorized(const char *dir, const curve_key *key, char *name, size_t cap, char *bad,
                     size_t bad_cap, sol_err *e) {
    DIR *d = opendir(dir);
    if (!d) return sol_err_set(e, -errno, "authorized keys %s: %s", dir, strerror(errno));
    int rc = -ENOENT;
    if (bad && bad_cap) bad[0] = '\0';
    for (struct dirent *de; rc == -ENOENT && (de = readdir(d));) {
        if (!is_pub(de->d_name)) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        curve_key k;
        sol_err ignore = {0};
        if (parse_file(path, &k, NULL, &ignore)) {
            if (bad && bad_cap) snprintf(bad, bad_cap, "%s", ignore.msg);
            continue;
        }
        if (strcmp(k.z85, key->z85)) continue;
        snprintf(name, cap, "%.*s", (int)(strlen(de->d_name) - 4), de->d_name);
        rc = 0;
    }
    closedir(d);
    if (rc) sol_err_set(e, rc, "key %s is not in %s", key->z85, dir);
    return rc;
}

int curve_count_authorized(const char *dir, sol_err *e) {
    DIR *d = opendir(dir);
    if (!d) return sol_err_set(e, -errno, "authorized keys %s: %s", dir, strerror(errno));
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        char path[4096];
        curve_key k;
        sol_err ignore = {0};
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        n += is_pub(de->d_name) && !parse_file(path, &k, NULL, &ignore);
    }
    closedir(d);
    return n;
}
