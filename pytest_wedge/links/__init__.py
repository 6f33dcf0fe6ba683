"""Link metering: bytes per second through each Toxiproxy link, for the timeline."""
