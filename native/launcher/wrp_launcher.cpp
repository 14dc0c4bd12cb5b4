/* wrp_launcher.cpp -- the installed `wrp` command: starts Python with Ctrl-C held back.
 *
 * A Python program cannot catch a SIGINT that arrives before its own code runs: during the
 * interpreter's start it kills the process, while `site` is imported it is a "Fatal Python error",
 * and during the console script's first imports a traceback.  This launcher blocks SIGINT and
 * SIGTERM, then executes the `wrp-python` script installed beside it (the same folder as this
 * program's real path), which inherits the blocked mask.  wrpkit/__main__.py unblocks both as its
 * first act, inside its handler, so a signal that came meanwhile is delivered there: one line,
 * "interrupted", exit 130 (docs/reliability.md).
 */
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <unistd.h>

namespace {
const char kTarget[] = "wrp-python";
}

int main(int, char** argv)
{
    sigset_t held;
    sigemptyset(&held);
    sigaddset(&held, SIGINT);
    sigaddset(&held, SIGTERM);
    sigprocmask(SIG_BLOCK, &held, nullptr);

    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0 || static_cast<size_t>(n) >= sizeof(self) - 1) {
        fprintf(stderr, "error: wrp cannot find its own path (/proc/self/exe): %s\n", strerror(errno));
        return 70;
    }
    self[n] = '\0';
    char* slash = strrchr(self, '/');
    size_t dir = slash ? static_cast<size_t>(slash - self) + 1 : 0;
    char target[PATH_MAX];
    if (dir + sizeof(kTarget) > sizeof(target)) {
        fprintf(stderr, "error: wrp's folder path is too long: %s\n", self);
        return 70;
    }
    memcpy(target, self, dir);
    memcpy(target + dir, kTarget, sizeof(kTarget));
    /* The mask stays blocked across exec; wrpkit/__main__.py unblocks it. */
    execv(target, argv);
    int e = errno;
    sigprocmask(SIG_UNBLOCK, &held, nullptr);
    fprintf(stderr, "error: wrp cannot start %s: %s\nhint: Reinstall wrpkit (pip install .), which installs both.\n",
            target, strerror(e));
    return 70;
}
