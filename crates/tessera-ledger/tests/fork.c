/* A process that forks after tessera_init: the child's calls say TESSERA_FORKED until
 * it calls tessera_init again, which opens its own handle; the parent's reservation
 * stays the parent's. Built and run by tests/c_abi.rs. Exit code 0 = all as expected. */
#include "tessera_ledger.h"
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static int expect(const char *what, int got, int want) {
    if (got != want) {
        printf("%s: got %d (%s), want %d\n", what, got, tessera_strerror(got), want);
        return 1;
    }
    return 0;
}

int main(void) {
    if (expect("parent init", tessera_init(), TESSERA_OK)) return 10;
    if (expect("parent pre_alloc", tessera_pre_alloc(0, 100, 0), TESSERA_OK)) return 11;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 12;
    if (pid == 0) {
        if (expect("child uses the parent's handle", tessera_pre_alloc(0, 1, 0), TESSERA_FORKED)) _exit(20);
        if (expect("child re-init", tessera_init(), TESSERA_OK)) _exit(21);
        if (expect("child pre_alloc", tessera_pre_alloc(0, 50, 0), TESSERA_OK)) _exit(22);
        if (expect("child frees the parent's memory", tessera_post_free(0, 100), TESSERA_OVER_FREE)) _exit(23);
        if (expect("child shutdown", tessera_shutdown(), TESSERA_OK)) _exit(24);
        fflush(stdout);
        _exit(0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("child failed with %d\n", WEXITSTATUS(status));
        return 13;
    }
    if (expect("parent frees its own", tessera_post_free(0, 100), TESSERA_OK)) return 14;
    if (expect("parent shutdown", tessera_shutdown(), TESSERA_OK)) return 15;
    printf("fork: ok\n");
    return 0;
}
