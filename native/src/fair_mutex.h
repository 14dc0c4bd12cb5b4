// fair_mutex.h -- a first-come, first-served lock that wakes only the next waiter.
//
// std::mutex lets a thread that just released the lock take it again before a
// thread that has waited for it is scheduled: with four threads replaying in a
// loop, one wait was seen to last hundreds of runs.  FairMutex hands the lock
// over in the order it was asked for, so a waiting thread's delay is bounded by
// the calls queued ahead of it.  Not recursive (as std::mutex).
//
// Waiters queue in a FIFO list, each on its own word; unlock() hands the lock
// to the head of the queue and wakes that thread alone, after releasing the
// queue's mutex, so the thread it wakes never blocks again on that mutex.  (A
// ticket lock on one condition variable with notify_all() woke every waiter at
// each hand-over, and only one of them could go on.)  On Linux the word is a
// futex; elsewhere each waiter has a condition variable, signalled under the
// queue's mutex (its owner may destroy it as soon as it sees the hand-over).
// There is no spin before sleeping: letting the next holder yield-spin instead of
// sleeping made the p99 worse on a loaded 2-core machine (docs/scale.md, "Measured").
#pragma once

#include <atomic>
#include <mutex>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#include <condition_variable>
#endif

namespace wrp {

class FairMutex {
public:
    void lock()
    {
        std::unique_lock<std::mutex> guard(m_);
        if (!held_) {  // free, so nobody is queued: the queue is only ever non-empty while held
            held_ = true;
            return;
        }
        Waiter me;
        if (tail_ != nullptr)
            tail_->next = &me;
        else
            head_ = &me;
        tail_ = &me;
#ifdef __linux__
        guard.unlock();
        // unlock() sets owner to 1 (held_ stays true) and then wakes this futex; a wake-up
        // that finds owner still 0 (spurious, or meant for an earlier Waiter at this address)
        // sleeps again.
        while (me.owner.load(std::memory_order_acquire) == 0)
            syscall(SYS_futex, &me.owner, FUTEX_WAIT_PRIVATE, 0, nullptr, nullptr, 0);
#else
        me.cv.wait(guard, [&] { return me.owner.load(std::memory_order_relaxed) != 0; });
#endif
    }

    void unlock()
    {
        std::unique_lock<std::mutex> guard(m_);
        Waiter* next = head_;
        if (next == nullptr) {
            held_ = false;
            return;
        }
        head_ = next->next;
        if (head_ == nullptr)
            tail_ = nullptr;
#ifdef __linux__
        guard.unlock();
        // `next` may have returned already (it saw owner == 1): a wake at the address of its
        // gone Waiter then wakes nobody, or a later Waiter at that address, which sleeps again
        // (see lock()).  The word is not read here again.
        std::atomic<int>* word = &next->owner;
        word->store(1, std::memory_order_release);
        syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
#else
        next->owner.store(1, std::memory_order_relaxed);
        next->cv.notify_one();  // under m_: the waiter can only see owner (and leave) under m_
#endif
    }

private:
    struct Waiter {
        Waiter* next = nullptr;
        std::atomic<int> owner{0};  // 1: the lock was handed to this waiter (a futex word on Linux)
#ifndef __linux__
        std::condition_variable cv;
#endif
    };

    std::mutex m_;
    bool held_ = false;
    Waiter* head_ = nullptr;  // the longest waiter: the next holder
    Waiter* tail_ = nullptr;  // the newest waiter
};

}  // namespace wrp
