"""Environment backends behind one small interface: prepare(lock) -> Env; Env.run(request)."""
