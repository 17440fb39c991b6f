/* cuda_loader: finds and loads the CUDA module and the NVIDIA libraries it needs (see header).
 * The libraries are opened RTLD_GLOBAL by full path before the module, so the module's own
 * dependencies (by soname) resolve to them wherever they were found. */
#include "cuda_loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_module.h"

#ifndef SOL_CUDA_MAJOR
#define SOL_CUDA_MAJOR "13"
#endif

/* What the module needs, in load order: the driver first (without it nothing else matters). */
typedef struct {
    const char *soname, *what;
} cuda_lib;

static const cuda_lib k_libs[] = {
    {"libcuda.so.1", "the driver's library"},
    {"libcudart.so." SOL_CUDA_MAJOR, "the CUDA runtime"},
    {"libcublasLt.so." SOL_CUDA_MAJOR, "cuBLASLt"},
    {"libnccl.so.2", "NCCL"},
};

/* Where CUDA toolkits and drivers put their libraries. */
static const char *const k_system_dirs[] = {
    "/usr/local/cuda/lib64",     "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/local/nvidia/lib64",   "/usr/local/nvidia/lib",
    "/usr/lib/x86_64-linux-gnu", "/usr/lib/wsl/lib",
};

/* Python environments whose pip wheels may hold the libraries (nvidia/<package>/lib). */
static const char *const k_env_vars[] = {"VIRTUAL_ENV", "CONDA_PREFIX"};
static const char *const k_env_globs[] = {"/opt/*/.venv", "/opt/*/venv", "/opt/conda", "/usr/local",
                                          "/usr"};
#define WHEEL_LIBS "/lib/python3*/*-packages/nvidia/*/lib"

enum { PATH_CAP = PATH_MAX };

/* dlopen of dir/name; 1 when loaded. A file that exists but fails to load keeps the loader's
 * reason in why (the first such), since "not found" would then be a lie. */
static int try_dir(const char *dir, const char *name, int flags, char *why, size_t cap) {
    char p[PATH_CAP];
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) return 0;
    if (access(p, F_OK) != 0) return 0;
    if (dlopen(p, flags)) return 1;
    if (!why[0]) snprintf(why, cap, "%s", dlerror());
    return 0;
}

static int try_path_list(const char *list, const char *name, int flags, char *why, size_t cap) {
    if (!list) return 0;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    for (char *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save))
        if (*d && try_dir(d, name, flags, why, cap)) return 1;
    return 0;
}

static int try_glob(const char *pattern, const char *name, int flags, char *why, size_t cap) {
    glob_t g;
    if (glob(pattern, GLOB_ONLYDIR, NULL, &g) != 0) return 0;
    int ok = 0;
    for (size_t i = 0; !ok && i < g.gl_pathc; i++)
        ok = try_dir(g.gl_pathv[i], name, flags, why, cap);
    globfree(&g);
    return ok;
}

static int try_prefix(const char *prefix, const char *name, int flags, char *why, size_t cap) {
    char pat[PATH_CAP];
    if (!prefix || !*prefix) return 0;
    if (snprintf(pat, sizeof pat, "%s%s", prefix, WHEEL_LIBS) >= (int)sizeof pat) return 0;
    return try_glob(pat, name, flags, why, cap);
}

/* The environment of each python3 on PATH (bin/..), e.g. PyTorch's venv on a GPU machine. */
static int try_python_on_path(const char *name, int flags, char *why, size_t cap) {
    const char *path = getenv("PATH");
    if (!path) return 0;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    char *save = NULL;
    for (char *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        char py[PATH_CAP];
        if (!*d || snprintf(py, sizeof py, "%s/python3", d) >= (int)sizeof py) continue;
        if (access(py, X_OK) != 0) continue;
        char prefix[PATH_CAP];
        snprintf(prefix, sizeof prefix, "%s/..", d);
        if (try_prefix(prefix, name, flags, why, cap)) return 1;
    }
    return 0;
}

static int try_python_envs(const char *name, int flags, char *why, size_t cap) {
    for (size_t i = 0; i < sizeof k_env_vars / sizeof *k_env_vars; i++)
        if (try_prefix(getenv(k_env_vars[i]), name, flags, why, cap)) return 1;
    if (try_python_on_path(name, flags, why, cap)) return 1;
    for (size_t i = 0; i < sizeof k_env_globs / sizeof *k_env_globs; i++) {
        char pat[PATH_CAP];
        snprintf(pat, sizeof pat, "%s%s", k_env_globs[i], WHEEL_LIBS);
        if (try_glob(pat, name, flags, why, cap)) return 1;
    }
    const char *home = getenv("HOME");
    char local[PATH_CAP];
    if (home && snprintf(local, sizeof local, "%s/.local", home) < (int)sizeof local)
        return try_prefix(local, name, flags, why, cap);
    return 0;
}

/* One library, searched in the documented order. */
static int load_lib(const cuda_lib *l, sol_err *err) {
    const int flags = RTLD_NOW | RTLD_GLOBAL;
    char why[256] = "";
    const char *user = getenv("SOL_CUDA_LIB_PATH");
    if (try_path_list(user, l->soname, flags, why, sizeof why)) return 0;
    if (dlopen(l->soname, flags)) return 0;
    for (size_t i = 0; i < sizeof k_system_dirs / sizeof *k_system_dirs; i++)
        if (try_dir(k_system_dirs[i], l->soname, flags, why, sizeof why)) return 0;
    if (try_python_envs(l->soname, flags, why, sizeof why)) return 0;
    if (why[0])
        return sol_err_set(err, -ELIBACC, "%s (%s) was found but does not load: %s", l->what,
                           l->soname, why);
    if (l == &k_libs[0])
        return sol_err_set(err, -ENODEV,
                           "no NVIDIA driver: %s (%s) was not found in SOL_CUDA_LIB_PATH (%s), "
                           "the system library path, /usr/local/nvidia/lib64 or "
                           "/usr/lib/x86_64-linux-gnu",
                           l->what, l->soname, user && *user ? user : "unset");
    return sol_err_set(
        err, -ELIBACC,
        "%s (%s) was not found: looked in SOL_CUDA_LIB_PATH (%s), the system library path, "
        "/usr/local/cuda/lib64 and Python environments' nvidia/*/lib ($VIRTUAL_ENV, "
        "$CONDA_PREFIX, each python3 on PATH, /opt/*/.venv, /usr/local, ~/.local); set "
        "SOL_CUDA_LIB_PATH to the folder that holds it",
        l->what, l->soname, user && *user ? user : "unset");
}

/* The folder of the running binary, for the bundle's and the install's layout. */
static int exe_dir(char *out, size_t cap) {
    char p[PATH_CAP];
    ssize_t n = readlink("/proc/self/exe", p, sizeof p - 1);
    if (n <= 0) return -1;
    p[n] = 0;
    char *slash = strrchr(p, '/');
    if (!slash) return -1;
    *slash = 0;
    snprintf(out, cap, "%s", p);
    return 0;
}

/* The module's path: SOL_CUDA_MODULE, beside the binary, or this build's own. "" if none. */
static void find_module(char *out, size_t cap, char *looked, size_t lcap) {
    const char *env = getenv("SOL_CUDA_MODULE");
    out[0] = 0;
    if (env && *env) {
        if (access(env, R_OK) == 0) snprintf(out, cap, "%s", env);
        snprintf(looked, lcap, "SOL_CUDA_MODULE=%s", env);
        return;
    }
    char dir[PATH_CAP] = "";
    const char *rel[] = {"/../lib/sol/libsol-cuda.so", "/../lib/libsol-cuda.so"};
    size_t used = 0;
    looked[0] = 0;
    if (exe_dir(dir, sizeof dir) == 0)
        for (size_t i = 0; i < 2; i++) {
            char p[PATH_CAP];
            snprintf(p, sizeof p, "%s%s", dir, rel[i]);
            used += (size_t)snprintf(looked + used, used < lcap ? lcap - used : 0, "%s%s",
                                     used ? ", " : "", p);
            if (!out[0] && access(p, R_OK) == 0) snprintf(out, cap, "%s", p);
        }
#ifdef SOL_CUDA_MODULE_BUILD
    if (!out[0] && access(SOL_CUDA_MODULE_BUILD, R_OK) == 0)
        snprintf(out, cap, "%s", SOL_CUDA_MODULE_BUILD);
    if (used < lcap) snprintf(looked + used, lcap - used, ", %s", SOL_CUDA_MODULE_BUILD);
#endif
}

static const sol_cuda_module *open_module(sol_err *err) {
    char path[PATH_CAP], looked[1024];
    find_module(path, sizeof path, looked, sizeof looked);
    if (!path[0]) {
#ifdef SOL_CUDA_MODULE_BUILD
        sol_err_set(err, -ELIBACC, "the CUDA module libsol-cuda.so was not found (looked in %s)",
                    looked);
#else
        sol_err_set(err, -ENOTSUP,
                    "this build has no CUDA backend: it was configured without nvcc and NCCL "
                    "(install the CUDA toolkit, then configure with -DSOL_CUDA=ON); no "
                    "libsol-cuda.so in %s",
                    looked);
#endif
        return NULL;
    }
    for (size_t i = 0; i < sizeof k_libs / sizeof *k_libs; i++)
        if (load_lib(&k_libs[i], err)) return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        sol_err_set(err, -ELIBACC, "the CUDA module %s does not load: %s", path, dlerror());
        return NULL;
    }
    sol_cuda_module_get_fn get = (sol_cuda_module_get_fn)dlsym(h, SOL_CUDA_MODULE_ENTRY);
    const sol_cuda_module *m = get ? get() : NULL;
    if (!m || m->abi != SOL_CUDA_MODULE_ABI || m->sizeof_ops != sizeof(sol_backend_ops) ||
        m->sizeof_opts != sizeof(sol_backend_opts) || m->sizeof_err != sizeof(sol_err)) {
        sol_err_set(err, -ELIBACC,
                    "the CUDA module %s is from another build of Sol (entry %s, abi %d, this "
                    "binary's abi %d): use the libsol-cuda.so built with this binary",
                    path, get ? "found" : "missing", m ? m->abi : -1, SOL_CUDA_MODULE_ABI);
        return NULL;
    }
    return m;
}

int sol_cuda_loader_variants(char out[][SOL_BACKEND_VARIANT_MAX], int cap) {
    sol_err quiet = {0, ""};
    const sol_cuda_module *m = open_module(&quiet);
    return m ? m->variants(out, cap) : 0;
}

sol_backend *sol_cuda_loader_create(const char *variant, const sol_backend_opts *o, sol_err *err) {
    const sol_cuda_module *m = open_module(err);
    return m ? m->create(variant, o, err) : NULL;
}
