"""Model providers behind one provider-neutral interface."""
