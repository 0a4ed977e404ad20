//! The per-slice I/O worker: takes requests from a bounded channel, submits whatever has
//! queued up as one batch (up to the queue depth), and parks in `recv` when idle — no
//! spinning. Callers block on a [`Completion`].

use crate::io::{IoQueue, IoRequest};
use parking_lot::{Condvar, Mutex};
use std::io;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;

#[derive(Default)]
pub struct Completion {
    res: Mutex<Option<io::Result<usize>>>,
    cv: Condvar,
}

impl Completion {
    pub fn new() -> Arc<Self> {
        Arc::new(Completion::default())
    }
    pub fn complete(&self, r: io::Result<usize>) {
        *self.res.lock() = Some(r);
        self.cv.notify_all();
    }
    pub fn wait(&self) -> io::Result<usize> {
        let mut g = self.res.lock();
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            self.cv.wait(&mut g);
        }
    }
}

/// How a request's result is delivered. Dropped without a result (a worker that panicked
/// in its backend), it delivers an error, so no caller waits forever and no load stays
/// LOADING.
pub struct Done(Option<Deliver>);

enum Deliver {
    /// A caller is blocked on the completion.
    Wait(Arc<Completion>),
    /// Nobody waits (readahead, async requests): the worker runs the callback.
    Call(Box<dyn FnOnce(io::Result<usize>) + Send>),
}

impl Done {
    pub fn wait(c: Arc<Completion>) -> Self {
        Done(Some(Deliver::Wait(c)))
    }
    pub fn call(f: Box<dyn FnOnce(io::Result<usize>) + Send>) -> Self {
        Done(Some(Deliver::Call(f)))
    }
    pub fn finish(mut self, r: io::Result<usize>) {
        self.deliver(r);
    }
    fn deliver(&mut self, r: io::Result<usize>) {
        match self.0.take() {
            Some(Deliver::Wait(c)) => c.complete(r),
            Some(Deliver::Call(f)) => f(r),
            None => {}
        }
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        self.deliver(Err(io::Error::other(
            "I/O request abandoned by its I/O worker (the backend panicked)",
        )));
    }
}

pub enum Msg {
    Io(IoRequest, Done),
    Stop,
}

/// Runs until a `Stop` message (or all senders are gone).
pub fn run(rx: Arc<Mutex<Receiver<Msg>>>, mut queue: Box<dyn IoQueue>, depth: usize) {
    let mut reqs = Vec::with_capacity(depth);
    let mut dones = Vec::with_capacity(depth);
    loop {
        let mut stop = false;
        {
            let rx = rx.lock();
            match rx.recv() {
                Ok(Msg::Io(r, c)) => {
                    reqs.push(r);
                    dones.push(c);
                }
                Ok(Msg::Stop) | Err(_) => stop = true,
            }
            while !stop && reqs.len() < depth {
                match rx.try_recv() {
                    Ok(Msg::Io(r, c)) => {
                        reqs.push(r);
                        dones.push(c);
                    }
                    Ok(Msg::Stop) | Err(TryRecvError::Disconnected) => stop = true,
                    Err(TryRecvError::Empty) => break,
                }
            }
        }
        if !reqs.is_empty() {
            let mut pending: Vec<Option<Done>> = dones.drain(..).map(Some).collect();
            queue.run(&mut reqs, &mut |i, r| {
                // An index the queue made up is ignored, not a panic on the worker.
                if let Some(d) = pending.get_mut(i).and_then(Option::take) {
                    d.finish(r);
                }
            });
            // A queue must report every request; never leave a caller waiting.
            for d in pending.into_iter().flatten() {
                d.finish(Err(io::Error::other(
                    "I/O request was not completed by the backend",
                )));
            }
            reqs.clear();
        }
        if stop {
            return;
        }
    }
}
