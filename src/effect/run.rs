//! `mihari run JOB`: a job's command under its lock. (being written)
