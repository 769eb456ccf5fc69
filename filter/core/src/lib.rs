//! The proof-of-work filter core: policy, challenge, clearance cookie, redirect, page.
