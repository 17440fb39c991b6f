/* status_page: hands out the HTML that the build embedded from status_page.html. */
#include "status_page.h"

extern const char sol_status_page_html[];
extern const size_t sol_status_page_html_len;

const char *status_page(size_t *len) {
    *len = sol_status_page_html_len;
    return sol_status_page_html;
}
