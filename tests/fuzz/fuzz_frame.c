/* fuzz_frame: arbitrary bytes into frame_decode. Whatever it accepts must be valid, re-encode,
 * decode again, and re-encode to the very same bytes (encoding is a function of the content). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sol_err e = {0};
    Sol__Envelope *first = NULL, *second = NULL;
    if (frame_decode(data, size, &first, &e) != 0) {
        if (first || e.msg[0] == '\0') abort(); /* failures leave nothing and say why */
        return 0;
    }
    uint8_t *a = NULL, *b = NULL;
    size_t alen = 0, blen = 0;
    if (frame_encode(first, &a, &alen, &e) != 0) abort();
    if (frame_decode(a, alen, &second, &e) != 0) abort();
    if (frame_encode(second, &b, &blen, &e) != 0) abort();
    if (alen != blen || memcmp(a, b, alen) != 0) abort();
    free(a);
    free(b);
    frame_free_envelope(first);
    frame_free_envelope(second);
    return 0;
}
