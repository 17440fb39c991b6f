/* Promise: the host emulation of CUDA (worker/backend/cuda/cuda_emu.h) runs kernel sources as a
 * GPU would in the ways that matter for testing them: per-block shared memory, real
 * __syncthreads barriers, warp shuffles; a kernel missing a barrier or shuffling from the wrong
 * lane gives a wrong answer here too, under one of its schedules (a warp racing ahead among
 * them); shared memory nobody wrote reads as NaN; a warp exchange some lanes never reach, a lane
 * outside a shuffle's mask or a mask naming an exited lane, and a launch past sm_80/sm_90's
 * limits abort with the kernel's name and the seed. */
#include <cmath>
#include <csetjmp>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
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

/* Runs fn under each of the emulation's schedules (then back to the seeded draw). */
static void each_schedule(const std::function<void(int)> &fn) {
    for (int sc = 0; sc < sol_emu::S_COUNT; sc++) {
        sol_emu::cfg().schedule = sc;
        fn(sc);
    }
    sol_emu::cfg().schedule = -1;
}

static void test_tree_sum_needs_its_barrier(void **state) {
    (void)state;
    static float x[2 * 256], out[2];
    fill(x, 2 * 256);
    double ref[2] = {0, 0};
    for (int i = 0; i < 2 * 256; i++)
        ref[i / 256] += x[i];
    int caught = 0;
    each_schedule([&](int) {
        SOL_LAUNCH(emu_tree_sum, dim3(2), dim3(256), 0, 0, x, out, 0);
        for (int b = 0; b < 2; b++)
            assert_true(fabs(out[b] - ref[b]) < 1e-3);
        SOL_LAUNCH(emu_tree_sum, dim3(2), dim3(256), 0, 0, x, out, 1); /* the bug */
        caught += fabs(out[0] - ref[0]) > 1.0 || fabs(out[1] - ref[1]) > 1.0;
    });
    assert_true(caught > 0);
}

/* Two block sums through one scratch: right under every schedule with reduce.cuh's barriers;
 * without the last one, the schedule that lets a warp run ahead gets threads wrong: once warp 0
 * has run into the second sum, it has overwritten the first total in scratch[0], and every warp
 * after it in that round reads its partial sum instead (the warp order is drawn per round, so
 * 0 to 7 of 8 warps per block; over 9 blocks, some). */
static void test_second_block_sum_needs_the_reuse_barrier(void **state) {
    (void)state;
    enum { ROWS = 3, DIM = 300 };
    static float x[ROWS * DIM], out[ROWS * 256 * 2];
    fill(x, ROWS * DIM);
    each_schedule([&](int) {
        for (int threads = 32; threads <= 256; threads *= 2) {
            SOL_LAUNCH(emu_mean_var, dim3(ROWS), dim3(threads), 0, 0, x, out, DIM);
            for (int r = 0; r < ROWS; r++) {
                double m = 0, v = 0;
                for (int i = 0; i < DIM; i++)
                    m += x[r * DIM + i] / DIM;
                for (int i = 0; i < DIM; i++)
                    v += (x[r * DIM + i] - m) * (x[r * DIM + i] - m) / DIM;
                for (int t = 0; t < threads; t++) {
                    const float *o = out + ((size_t)r * threads + t) * 2;
                    if (!(fabs(o[0] - m) < 1e-4 && fabs(o[1] - v) < 1e-3 * v))
                        fail_msg("%s schedule, %d threads: thread %d of row %d has %g, %g (want "
                                 "%g, %g)",
                                 sol_emu::schedule_name(sol_emu::cfg().schedule), threads, t, r,
                                 o[0], o[1], m, v);
                }
            }
        }
    });
    int wrong[sol_emu::S_COUNT] = {0};
    each_schedule([&](int sc) {
        for (int launch = 0; launch < 3; launch++) {
            SOL_LAUNCH(emu_sum_twice, dim3(ROWS), dim3(256), 0, 0, x, out, DIM, 0, 0);
            for (int r = 0; r < ROWS; r++) {
                double sum = 0;
                for (int i = 0; i < DIM; i++)
                    sum += x[r * DIM + i];
                for (int t = 0; t < 256; t++) {
                    const float *o = out + ((size_t)r * 256 + t) * 2;
                    wrong[sc] += !(fabs(o[0] - sum) < 1e-3 && fabs(o[1] - 2 * sum) < 2e-3);
                }
            }
        }
    });
    print_message("  threads wrong without the reuse barrier: in-order %d, reversed %d, shuffled "
                  "%d, warp %d (of %d)\n",
                  wrong[0], wrong[1], wrong[2], wrong[3], 3 * ROWS * 256);
    assert_true(wrong[sol_emu::S_WARP] > 0);
}

/* Shared memory is garbage on a GPU until written: here NaN, in every block (nothing carries
 * over from the block before), static and dynamic. */
static void test_unwritten_shared_memory_is_nan(void **state) {
    (void)state;
    enum { ROWS = 4, DIM = 256 };
    static float x[ROWS * DIM], out[ROWS * 256 * 2];
    fill(x, ROWS * DIM);
    each_schedule([&](int) {
        SOL_LAUNCH(emu_sum_twice, dim3(ROWS), dim3(128), 0, 0, x, out, DIM, 1, 0);
        for (int i = 0; i < ROWS * 128 * 2; i++)
            assert_false(std::isnan(out[i]));
        /* the off-by-one read of slot n_warps, which no warp wrote */
        SOL_LAUNCH(emu_sum_twice, dim3(ROWS), dim3(128), 0, 0, x, out, DIM, 1, 1);
        for (int i = 0; i < ROWS * 128 * 2; i++)
            assert_true(std::isnan(out[i]));
    });
    static float dyn[3 * 64];
    SOL_LAUNCH(emu_read_dyn_smem, dim3(3), dim3(64), 64 * sizeof(float), 0, dyn);
    for (int i = 0; i < 3 * 64; i++)
        assert_true(std::isnan(dyn[i]));
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

/* Runs fn in a child process and expects it to abort with a message holding every string of
 * want (the emulation's reports end the process, as a GPU's broken kernel would). */
static void expect_abort(const std::function<void()> &fn,
                         std::initializer_list<const char *> want) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        fn();
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
    if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT))
        fail_msg("expected an abort, the child ended with status %d: %s", status, msg);
    for (const char *w : want)
        if (!strstr(msg, w)) fail_msg("the abort message lacks \"%s\": %s", w, msg);
}

static void test_divergent_shuffle_is_reported(void **state) {
    (void)state;
    expect_abort(
        [] {
            static float out[64];
            SOL_LAUNCH(emu_divergent_shuffle, dim3(1), dim3(64), 0, 0, out);
        },
        {"deadlock", "emu_divergent_shuffle", "SOL_EMU_SEED=1"});
}

/* Shuffle and __syncwarp masks: the lanes of a mask meet, and only they; a lane outside the
 * mask it passes, an exited lane the mask names, or a read from a lane outside the mask aborts. */
static void test_shuffle_masks(void **state) {
    (void)state;
    static float out[64];
    each_schedule([&](int) {
        SOL_LAUNCH(emu_masks, dim3(1), dim3(64), 0, 0, out, 0);
        for (int t = 0; t < 64; t++)
            assert_true(out[t] == (float)((t & 31) < 16 ? t ^ 1 : t));
    });
    expect_abort([] { SOL_LAUNCH(emu_masks, dim3(1), dim3(64), 0, 0, out, 1); },
                 {"__shfl_xor_sync with mask 0x0000ffff", "leaves its lane", "emu_masks"});
    expect_abort([] { SOL_LAUNCH(emu_masks, dim3(1), dim3(64), 0, 0, out, 2); },
                 {"which has exited", "emu_masks", "SOL_EMU_SEED="});
    expect_abort([] { SOL_LAUNCH(emu_masks, dim3(1), dim3(64), 0, 0, out, 3); },
                 {"__syncwarp", "leaves its lane", "emu_masks"});
    expect_abort([] { SOL_LAUNCH(emu_masks, dim3(1), dim3(64), 0, 0, out, 4); },
                 {"outside its mask", "emu_masks"});
    /* a full mask in a block of 48 threads: its second warp has no lanes 16..31 */
    expect_abort([] { SOL_LAUNCH(emu_masks, dim3(1), dim3(48), 0, 0, out, 5); },
                 {"the block does not have", "emu_masks"});
}

/* sm_80/sm_90's launch limits, each just past its edge (and each edge itself runs). */
static void test_launch_limits(void **state) {
    (void)state;
    static float out[1024];
    /* the edges themselves pass (checked without running: that grid has 2^62 blocks) */
    sol_emu::check_launch("emu_nop", dim3(2147483647u, 65535, 65535), dim3(1024), 48 * 1024);
    sol_emu::check_launch("emu_nop", dim3(1), dim3(16, 1, 64), 0);
    sol_emu::check_launch("emu_nop", dim3(1), dim3(1, 1024), 0);
    SOL_LAUNCH(emu_big_shared<12288>, dim3(2), dim3(32), 0, 0, out);
    const struct {
        dim3 grid, block;
        size_t smem;
        const char *says;
    } bad[] = {
        {dim3(1), dim3(1025), 0, "block of (1025,1,1)"},
        {dim3(1), dim3(32, 33), 0, "block of (32,33,1)"},
        {dim3(1), dim3(1, 1, 65), 0, "block of (1,1,65)"},
        {dim3(1), dim3(0), 0, "empty grid"},
        {dim3(0), dim3(32), 0, "empty grid"},
        {dim3(1, 1, 0), dim3(32), 0, "empty grid"},
        {dim3(2147483648u), dim3(32), 0, "grid of (2147483648,1,1)"},
        {dim3(1, 65536), dim3(32), 0, "grid of (1,65536,1)"},
        {dim3(1, 1, 65536), dim3(32), 0, "grid of (1,1,65536)"},
        {dim3(1), dim3(32), 48 * 1024 + 1, "49153 bytes of dynamic shared memory"},
    };
    for (const auto &c : bad)
        expect_abort([&] { SOL_LAUNCH(emu_nop, c.grid, c.block, c.smem, 0); },
                     {c.says, "emu_nop", "SOL_EMU_SEED="});
    expect_abort([] { SOL_LAUNCH(emu_big_shared<12289>, dim3(1), dim3(32), 0, 0, out); },
                 {"49156 bytes of static", "emu_big_shared<12289>"});
    expect_abort([] { SOL_LAUNCH(emu_big_shared<8192>, dim3(1), dim3(32), 16385, 0, out); },
                 {"32768 bytes of static and 16385 of dynamic", "emu_big_shared<8192>"});
}

/* Programmatic dependent launch: every thread must open with sol_grid_dependency(), on every
 * path (sol_cuda_kernel.h); a thread that returns before it, meets a barrier before it or calls
 * it twice aborts naming the kernel. */
static void test_pdl_wait_is_checked(void **state) {
    (void)state;
    static float out[64];
    SOL_LAUNCH(emu_pdl, dim3(2), dim3(64), 0, 0, out, 3);
    assert_true(out[63] == 1.0f);
    expect_abort([] { SOL_LAUNCH(emu_pdl, dim3(1), dim3(64), 0, 0, out, 0); },
                 {"reaches its end before sol_grid_dependency()", "emu_pdl"});
    expect_abort([] { SOL_LAUNCH(emu_pdl, dim3(1), dim3(64), 0, 0, out, 1); },
                 {"reaches __syncthreads() before sol_grid_dependency()", "emu_pdl"});
    expect_abort([] { SOL_LAUNCH(emu_pdl, dim3(1), dim3(64), 0, 0, out, 2); },
                 {"calls sol_grid_dependency() twice", "emu_pdl"});
}

/* After kernels ran as fibers on this thread, a longjmp (what a failed cmocka assertion does)
 * must still unpoison the stack: the fiber switches have to give ASan this thread's own stack
 * bounds back. With bounds of [0, 0) ASan ignored the longjmp, the dead frames' redzones stayed
 * poisoned, and the next deep call reported a stack-buffer-overflow that was not there (CI,
 * test_model_tp). Only an ASan build can fail this; elsewhere it checks the write itself. */
static jmp_buf g_jump;

/* Called through a volatile pointer: GCC calls a function whose every path recurses or jumps
 * "infinite recursion". */
static void (*volatile g_deeper)(int);

__attribute__((noinline)) static void leave_deep(int depth) {
    volatile char pad[64];
    pad[0] = (char)depth;
    if (depth > 0) g_deeper(depth - 1);
    longjmp(g_jump, 1 + pad[0]);
}

__attribute__((noinline)) static size_t write_wide(const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return n > 0 ? strlen(buf) : 0;
}

static void test_longjmp_after_fibers(void **state) {
    (void)state;
    static float x[4 * 300], w[300], out[4 * 300];
    fill(x, 4 * 300);
    fill(w, 300);
    SOL_LAUNCH(emu_rmsnorm, dim3(4), dim3(128), 0, 0, x, w, out, 300, 1e-5f);
    g_deeper = leave_deep;
    if (!setjmp(g_jump)) leave_deep(16);
    assert_int_equal(write_wide("%2000s", "x"), 2000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_sum_and_rmsnorm),
        cmocka_unit_test(test_tree_sum_needs_its_barrier),
        cmocka_unit_test(test_second_block_sum_needs_the_reuse_barrier),
        cmocka_unit_test(test_unwritten_shared_memory_is_nan),
        cmocka_unit_test(test_warp_shuffle_offsets),
        cmocka_unit_test(test_divergent_shuffle_is_reported),
        cmocka_unit_test(test_shuffle_masks),
        cmocka_unit_test(test_launch_limits),
        cmocka_unit_test(test_pdl_wait_is_checked),
        cmocka_unit_test(test_longjmp_after_fibers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
