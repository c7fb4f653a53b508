/*
 * Submitting GPU work to tesserad from C. Built and run against a daemon by
 * crates/tessera-client/tests/c_abi.rs:
 *
 *   cc -I crates/tessera-client/include examples/client_demo.c \
 *      -L target/debug -ltessera_client -Wl,-rpath,target/debug -o client_demo
 *   ./client_demo $XDG_RUNTIME_DIR/tesserad.sock
 */
#include <stdio.h>
#include <string.h>
#include "tessera_client.h"

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s SOCKET\n", argv[0]); return 2; }
    TesseraClient *c = NULL;
    if (tessera_client_connect(argv[1], &c) != TESSERA_CLIENT_OK) { fprintf(stderr, "no daemon\n"); return 1; }

    uint64_t tenant;
    if (tessera_client_register(c, 1, 200, 0, 0, &tenant) != TESSERA_CLIENT_OK) return 1;

    const char *input = "ping";
    uint64_t handles[4];
    for (int i = 0; i < 4; i++) {
        /* kernel 1, 20 ms of emulated work, 1 MiB of device memory, 8 output bytes */
        if (tessera_client_submit(c, tenant, 1, 20000000, 1 << 20, (const uint8_t *)input, 4, 8, &handles[i])
            != TESSERA_CLIENT_OK) return 1;
    }
    int done = 0;
    for (int i = 0; i < 4; i++) {
        TesseraCompletion r;
        uint8_t out[8];
        if (tessera_client_wait(c, handles[i], 10000, &r, out, sizeof out) != TESSERA_CLIENT_OK) return 1;
        if (r.outcome == TESSERA_DONE && r.output_len == 8 && memcmp(out, "pingping", 8) == 0) done++;
        printf("task %llu: outcome %u on GPU %d after %.1f ms queued, %.1f ms running\n",
               (unsigned long long)r.handle, r.outcome, r.gpu, r.queued_ns / 1e6, r.ran_ns / 1e6);
    }
    /* someone else's tenant is refused, not crashed */
    uint64_t h;
    TesseraCompletion r;
    tessera_client_submit(c, tenant + 1000, 1, 1, 0, NULL, 0, 0, &h);
    tessera_client_wait(c, h, 10000, &r, NULL, 0);
    tessera_client_disconnect(c);
    printf("%d of 4 done; foreign tenant: outcome %u reason %u\n", done, r.outcome, r.reason);
    return done == 4 && r.outcome == TESSERA_FAILED && r.reason == 2 ? 0 : 3;
}
