// stderr_capture.cpp -- see stderr_capture.h.
#include "stderr_capture.h"

#include <cstdio>
#include <sys/mman.h>
#include <unistd.h>

#include "mapped_file.h"

namespace wrp {

StderrCapture::StderrCapture(bool enabled)
{
    if (!enabled)
        return;
    std::fflush(stderr);
    capture_fd_ = memfd_create("wrp-warp-stderr", MFD_CLOEXEC);
    if (capture_fd_ < 0)
        return;  // capture is best effort: Warp then prints to the real stderr
    saved_fd_ = dup(2);
    if (saved_fd_ < 0 || dup2(capture_fd_, 2) < 0) {
        if (saved_fd_ >= 0)
            close(saved_fd_);
        close(capture_fd_);
        saved_fd_ = capture_fd_ = -1;
        return;
    }
    set_fault_stderr(saved_fd_);  // a file truncated meanwhile is reported on the real stderr
}

StderrCapture::~StderrCapture() { finish(); }

std::string StderrCapture::finish()
{
    if (saved_fd_ < 0)
        return "";
    std::fflush(stderr);
    dup2(saved_fd_, 2);
    set_fault_stderr(-1);
    close(saved_fd_);
    saved_fd_ = -1;
    std::string text;
    char buf[4096];
    ssize_t n;
    off_t pos = 0;
    while (text.size() < 4096 && (n = pread(capture_fd_, buf, sizeof(buf), pos)) > 0) {
        text.append(buf, static_cast<size_t>(n));
        pos += n;
    }
    close(capture_fd_);
    capture_fd_ = -1;
    if (text.size() > 4096) {
        text.resize(4096);
        text += "...";
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
        text.pop_back();
    return text;
}

}  // namespace wrp
