#include "service_thread.hpp"

#include <pthread.h>
#include <semaphore.h>
#include <signal.h>

#include <cerrno>

namespace fastsock {

namespace {

struct Start {
  void (*body)(void*);
  void* arg;
  sem_t running;  // posted by the new thread (glibc's sem_post lets the waiter destroy it)
};

void* thread_main(void* p) {
  auto* start = static_cast<Start*>(p);
  void (*body)(void*) = start->body;
  void* arg = start->arg;
  sem_post(&start->running);  // `start` is the starter's, gone once it sees this
  body(arg);
  return nullptr;
}

}  // namespace

int start_service_thread(void (*body)(void*), void* arg) noexcept {
  Start start{body, arg, {}};
  if (sem_init(&start.running, 0, 0) != 0) return errno;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t thread;
  const int rc = pthread_create(&thread, &attr, thread_main, &start);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
  if (rc == 0)
    while (sem_wait(&start.running) != 0 && errno == EINTR) {
    }
  sem_destroy(&start.running);
  return rc;
}

}  // namespace fastsock
