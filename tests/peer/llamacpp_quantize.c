/* llamacpp_quantize: llama.cpp's own quantizer (llama_model_quantize from the prebuilt library
 * inside node-llama-cpp) as a test instrument: it writes the reference K-quant files that users
 * download, so Sol's tests can load exactly those. Built by tests/integration/kquant_llamacpp.sh.
 *   llamacpp_quantize IN.gguf OUT.gguf FTYPE   (llama_ftype: 15 Q4_K_M, 17 Q5_K_M, 18 Q6_K) */
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: llamacpp_quantize IN.gguf OUT.gguf FTYPE\n");
        return 2;
    }
    llama_backend_init();
    llama_model_quantize_params p = llama_model_quantize_default_params();
    p.ftype = (enum llama_ftype)atoi(argv[3]);
    p.nthread = 2;
    uint32_t rc = llama_model_quantize(argv[1], argv[2], &p);
    llama_backend_free();
    if (rc) fprintf(stderr, "llamacpp_quantize: llama_model_quantize returned %u\n", rc);
    return rc ? 1 : 0;
}
