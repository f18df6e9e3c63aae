"""The static half of tfdoctor: files -> facts -> rules -> findings -> output. Never imports TensorFlow."""
