/* Promise: the host emulation of CUDA (worker/backend/cuda/cuda_emu.h) runs kernel sources as a
 * GPU would in the ways that matter for testing them: per-block shared memory, real
 * __syncthreads barriers, warp shuffles; a kernel missing a barrier or shuffling from the wrong
 * lane gives a wrong answer here too, and a warp exchange some lanes never reach is reported. */
#include <cmath>
#include <csetjmp>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <sys/wait.h>
#include <unistd.h>
extern "C" {
#include <cmocka.h>
}

#include "emu_kernels.cuh"

static void fill(float *x, int n) {
    for (int i = 0; i < n; i++)
        x[i] = (float)((i * 37) % 101) / 7.0f - 6.0f;
}

static void test_block_sum_and_rmsnorm(void **state) {
    (void)state;
    enum { ROWS = 3, DIM = 300 };
    static float x[ROWS * DIM], w[DIM], out[ROWS * DIM];
    fill(x, ROWS * DIM);
    fill(w, DIM);
    for (int threads = 32; threads <= 256; threads *= 2) {
        SOL_LAUNCH(emu_rmsnorm, dim3(ROWS), dim3(threads), 0, 0, x, w, out, DIM, 1e-5f);
        for (int r = 0; r < ROWS; r++) {
            double ss = 0;
            for (int i = 0; i < DIM; i++)
                ss += (double)x[r * DIM + i] * x[r * DIM + i];
            double s = 1.0 / sqrt(ss / DIM + 1e-5);
            for (int i = 0; i < DIM; i++)
                assert_true(fabs(out[r * DIM + i] - x[r * DIM + i] * s * w[i]) <=
                            1e-5 * (1 + fabs(x[r * DIM + i] * s * w[i])));
        }
    }
}

static void test_tree_sum_needs_its_barrier(void **state) {
    (void)state;
    static float x[2 * 256], out[2];
    fill(x, 2 * 256);
    double ref[2] = {0, 0};
    for (int i = 0; i < 2 * 256; i++)
        ref[i / 256] += x[i];
    SOL_LAUNCH(emu_tree_sum, dim3(2), dim3(256), 0, 0, x, out, 0);
    for (int b = 0; b < 2; b++)
        assert_true(fabs(out[b] - ref[b]) < 1e-3);
    SOL_LAUNCH(emu_tree_sum, dim3(2), dim3(256), 0, 0, x, out, 1); /* the bug */
    assert_true(fabs(out[0] - ref[0]) > 1.0);
}

static void test_warp_shuffle_offsets(void **state) {
    (void)state;
    static float x[128], out[4];
    fill(x, 128);
    SOL_LAUNCH(emu_warp_sum, dim3(1), dim3(128), 0, 0, x, out, 16);
    for (int wp = 0; wp < 4; wp++) {
        double ref = 0;
        for (int i = 0; i < 32; i++)
            ref += x[wp * 32 + i];
        assert_true(fabs(out[wp] - ref) < 1e-3);
    }
    float right = out[0];
    SOL_LAUNCH(emu_warp_sum, dim3(1), dim3(128), 0, 0, x, out, 8); /* the bug: half the lanes */
    assert_true(fabs(out[0] - right) > 1.0);
}

/* The emulator aborts with a message naming the deadlock; run it in a child process. */
static void test_divergent_shuffle_is_reported(void **state) {
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        static float out[64];
        SOL_LAUNCH(emu_divergent_shuffle, dim3(1), dim3(64), 0, 0, out);
        _exit(0);
    }
    close(fds[1]);
    char msg[4096] = {0}; /* everything the child wrote: sanitizers may print first */
    ssize_t got = 0, r;
    while (got < (ssize_t)sizeof msg - 1 && (r = read(fds[0], msg + got, sizeof msg - 1 - got)) > 0)
        got += r;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    assert_true(got > 0 && strstr(msg, "deadlock") != nullptr);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_sum_and_rmsnorm),
        cmocka_unit_test(test_tree_sum_needs_its_barrier),
        cmocka_unit_test(test_warp_shuffle_offsets),
        cmocka_unit_test(test_divergent_shuffle_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
