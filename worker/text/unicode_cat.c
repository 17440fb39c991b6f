/* unicode_cat: see unicode_cat.h. ASCII is answered by arithmetic; everything else by binary search
 * over sorted, non-overlapping [first, last] ranges. */
#include "unicode_cat.h"

#include <stddef.h>

#include "unicode_cat_data.inc"

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cpt) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cpt < r[mid][0]) {
            hi = mid;
        } else if (cpt > r[mid][1]) {
            lo = mid + 1;
        } else {
            return 1;
        }
    }
    return 0;
}

static int is_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

unsigned ucat_of(uint32_t cpt) {
    if (cpt < 0x80) {
        if ((cpt | 0x20) >= 'a' && (cpt | 0x20) <= 'z') return UCAT_LETTER;
        if (cpt >= '0' && cpt <= '9') return UCAT_NUMBER;
        return is_space(cpt) ? UCAT_SPACE : 0;
    }
    if (is_space(cpt)) return UCAT_SPACE;
    if (in_ranges(ucat_letters, sizeof ucat_letters / sizeof ucat_letters[0], cpt))
        return UCAT_LETTER;
    if (in_ranges(ucat_numbers, sizeof ucat_numbers / sizeof ucat_numbers[0], cpt))
        return UCAT_NUMBER;
    return 0;
}
