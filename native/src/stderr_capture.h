// stderr_capture.h -- collect what Warp prints on stderr during one call.
//
// Much of Warp's validation and all of its replay diagnostics go only to
// stderr (fprintf), never to wp_get_error_string().  To put them into our
// error messages, file descriptor 2 is pointed at an anonymous memory file
// for the duration of a call and restored afterwards.  This is process-wide,
// so it is opt-in (wrp_options.capture_warp_stderr) and only used while the
// library's Warp lock is held.
#pragma once

#include <string>

namespace wrp {

class StderrCapture {
public:
    explicit StderrCapture(bool enabled);
    ~StderrCapture();  // restores stderr if still redirected
    StderrCapture(const StderrCapture&) = delete;
    StderrCapture& operator=(const StderrCapture&) = delete;

    // Restore stderr and return what was written (at most 4 KiB, trimmed).
    std::string finish();

private:
    int saved_fd_ = -1;
    int capture_fd_ = -1;
};

}  // namespace wrp
