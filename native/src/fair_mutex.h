// fair_mutex.h -- a first-come, first-served lock (a ticket lock on a condition variable).
//
// std::mutex lets a thread that just released the lock take it again before a
// thread that has waited for it is scheduled: with four threads replaying in a
// loop, one wait was seen to last hundreds of runs.  FairMutex hands the lock
// over in the order it was asked for, so a waiting thread's delay is bounded by
// the calls queued ahead of it.  Not recursive (as std::mutex).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace wrp {

class FairMutex {
public:
    void lock()
    {
        std::unique_lock<std::mutex> guard(m_);
        const uint64_t ticket = next_++;
        cv_.wait(guard, [&] { return serving_ == ticket; });
    }

    void unlock()
    {
        {
            std::lock_guard<std::mutex> guard(m_);
            serving_++;
        }
        cv_.notify_all();  // the holder of the next ticket goes; the others wait again
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    uint64_t next_ = 0;     // the ticket the next lock() takes
    uint64_t serving_ = 0;  // the ticket that holds the lock
};

}  // namespace wrp
