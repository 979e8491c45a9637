"""`loopwarden audit`: replay the topics and compare each replayed decision with the recorded one."""
