# The loopwarden image: the `loopwarden` command (worker, topics, simulate, replay).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY detectors ./detectors
COPY streams ./streams
RUN pip install --no-cache-dir ".[worker]"
COPY examples ./examples
ENV LOOPWARDEN_WEB_HOST=0.0.0.0
ENTRYPOINT ["loopwarden"]
CMD ["--help"]
