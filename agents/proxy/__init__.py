"""The proxy (seed 001): checks, timestamps and publishes requests, and answers the client."""
