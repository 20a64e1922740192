//! The message-driven style of the clustering's inner loops ([`Style::Messages`]), beside the
//! loop style's pool `for_each` ([`Style::Loop`]): \[Qiu2012\] compares the two on the same
//! clustering (CCR ports against TPL loops). Worker 0 posts every block of rows as a task
//! message to the workers' ports, round-robin; each worker computes its blocks into buffers
//! of their own and posts them to worker 0's result port; worker 0 delivers each result as it
//! arrives. Every result is a function of its block alone, so both styles give the same bits.
//!
//! [`Style::Messages`]: super::Style::Messages
//! [`Style::Loop`]: super::Style::Loop

use std::sync::Mutex;
use std::time::Duration;
use tiers_node::{Inbox, InboxSender, Pool};

/// Rows per task: small enough to balance 2–16 workers on the matrices the clustering sees,
/// large enough that a message carries O(rows · N) work.
pub(crate) const BLOCK_ROWS: usize = 64;

/// A task message: compute a block, or stop.
enum Task {
    Block(usize),
    Stop,
}

/// A result message: the block and its values.
type Answer = (usize, Vec<f64>);

/// Takes what the first caller finds (each slot is taken once, by its own worker).
fn take<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// Runs `tasks` tasks by messages on `pool`: task `b` writes `len(b)` values through
/// `work(b, buf)`, and `deliver(b, buf)` receives every result on worker 0, in arrival order.
pub(crate) fn by_messages<L, W, D>(pool: &Pool, tasks: usize, len: L, work: W, deliver: D)
where
    L: Fn(usize) -> usize + Sync,
    W: Fn(usize, &mut [f64]) + Sync,
    D: FnMut(usize, &[f64]) + Send,
{
    let t = pool.threads().max(1);
    // Room for every task and the stop message, so that worker 0 posts them all without
    // waiting (it also consumes its own port, later).
    let room = tasks + 1;
    let ports: Vec<Inbox<Task>> = (0..t).map(|_| Inbox::with_max_producers(room, 1)).collect();
    let post: Vec<InboxSender<Task>> = ports.iter().map(Inbox::sender).collect();
    let results: Inbox<Answer> = Inbox::with_max_producers(room, t);
    let answer: Vec<Mutex<Option<InboxSender<Answer>>>> =
        (0..t).map(|_| Mutex::new(Some(results.sender()))).collect();
    let ports: Vec<Mutex<Option<Inbox<Task>>>> =
        ports.into_iter().map(|p| Mutex::new(Some(p))).collect();
    let coordinator = Mutex::new(Some((post, results, deliver)));
    pool.spmd(|w| {
        let me = w.index();
        let (Some(mut port), Some(mut answer)) = (take(&ports[me]), take(&answer[me])) else {
            return;
        };
        let compute = |b: usize| {
            let mut buf = vec![0.0; len(b)];
            work(b, &mut buf);
            buf
        };
        if me != 0 {
            loop {
                match port.pop_timeout(Duration::from_millis(50)) {
                    Some(Task::Block(b)) => answer.push((b, compute(b))),
                    Some(Task::Stop) => return,
                    None => {}
                }
            }
        }
        let Some((mut post, mut results, mut deliver)) = take(&coordinator) else {
            return;
        };
        for b in 0..tasks {
            post[b % t].push(Task::Block(b));
        }
        for p in post.iter_mut() {
            p.push(Task::Stop);
        }
        let mut got = 0;
        let mut own = true;
        while got < tasks {
            while let Some((b, buf)) = results.try_pop() {
                deliver(b, &buf);
                got += 1;
            }
            if own {
                match port.try_pop() {
                    Some(Task::Block(b)) => {
                        deliver(b, &compute(b));
                        got += 1;
                    }
                    _ => own = false,
                }
            } else if got < tasks {
                if let Some((b, buf)) = results.pop_timeout(Duration::from_millis(50)) {
                    deliver(b, &buf);
                    got += 1;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_is_delivered_once_with_its_own_result() {
        for threads in [1, 2, 3] {
            let pool = Pool::new(threads).unwrap();
            for tasks in [0, 1, 5, 200] {
                let mut seen = vec![0usize; tasks];
                by_messages(
                    &pool,
                    tasks,
                    |b| b % 7 + 1,
                    |b, buf| buf.iter_mut().for_each(|v| *v = b as f64),
                    |b, buf| {
                        assert_eq!(buf.len(), b % 7 + 1);
                        assert!(buf.iter().all(|&v| v == b as f64));
                        seen[b] += 1;
                    },
                );
                assert!(
                    seen.iter().all(|&s| s == 1),
                    "{threads} threads, {tasks} tasks"
                );
            }
        }
    }
}
